"""The Docker runtime's calls to dockerd, through the docker SDK: images (look up, pull with
progress), containers (create from a ContainerSpec, copy files in, start, signal, wait, inspect,
remove, find by label) and their output, read from the logs endpoint as Docker multiplexes it so
that stdout and stderr stay apart.

The logs endpoint (not attach) because it serves a running and an exited container alike, from
the first line, and ends when the container does: a supervisor that starts reading late, or again
after a restart, reads the same bytes in the same order.
"""

from __future__ import annotations

import io
import struct
import tarfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.types
from docker.utils import parse_repository_tag

from services.agent.runtime.docker_spec import CONTAINER_WORKDIR, ContainerSpec, with_account

# Docker's stream ids in a multiplexed frame header.
_STREAMS = {1: "stdout", 2: "stderr"}
_HEADER = struct.Struct(">BxxxL")
# Pull progress: at most one "Downloading"/"Extracting" line per layer this often.
PULL_PROGRESS_INTERVAL_S = 1.0


class DockerUnavailable(RuntimeError):
    """dockerd cannot be reached; the message says why."""


class ImageUnavailable(RuntimeError):
    """The image is neither here nor pullable; the message names it and says why."""


class FrameDecoder:
    """Docker's multiplexed stream: 8-byte headers (stream id, size) each followed by a payload.
    Feed it chunks as they arrive; it returns the complete frames as (stdout|stderr, bytes)."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> list[tuple[str, bytes]]:
        self._buffer += chunk
        frames = []
        while len(self._buffer) >= _HEADER.size:
            stream_id, size = _HEADER.unpack_from(self._buffer)
            end = _HEADER.size + size
            if len(self._buffer) < end:
                break
            payload = bytes(self._buffer[_HEADER.size : end])
            del self._buffer[:end]
            if stream_id in _STREAMS:  # 0 (stdin) is never written here
                frames.append((_STREAMS[stream_id], payload))
        return frames


@dataclass(frozen=True)
class ContainerEnd:
    exit_code: int
    oom_killed: bool
    error: str
    finished_at: float


def connect() -> docker.DockerClient:
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except docker.errors.DockerException as exc:
        raise DockerUnavailable(f"cannot reach dockerd: {exc}") from exc
    return client


def image_reference(image: str) -> tuple[str, str]:
    """(repository, tag) with Docker's default tag."""
    repository, tag = parse_repository_tag(image)
    return repository, tag or "latest"


class DockerEngine:
    def __init__(self, client: docker.DockerClient | None = None) -> None:
        self._client = client or connect()
        self._api = self._client.api

    # -- images ------------------------------------------------------------------------------------
    def has_image(self, image: str) -> bool:
        try:
            self._api.inspect_image(image)
        except docker.errors.ImageNotFound:
            return False
        except docker.errors.APIError as exc:
            if exc.status_code == 404:
                return False
            raise
        return True

    def pull(self, image: str, auth: Mapping[str, str] | None, progress: Callable[[str], None]) -> None:
        """Pull `image`, telling `progress` what happens (one line per step and layer, throttled)."""
        repository, tag = image_reference(image)
        last_shown: dict[tuple[str, str], float] = {}
        try:
            for item in self._api.pull(
                repository, tag=tag, stream=True, decode=True, auth_config=dict(auth) if auth else None
            ):
                if item.get("error"):
                    raise ImageUnavailable(f"image {image} could not be pulled: {item['error']}")
                line = pull_progress_line(item, last_shown)
                if line:
                    progress(line)
        except docker.errors.DockerException as exc:
            why = getattr(exc, "explanation", None) or str(exc)  # dockerd's own words, when it said any
            raise ImageUnavailable(f"image {image} not found locally and could not be pulled: {why}") from exc
        if not self.has_image(image):
            raise ImageUnavailable(f"image {image} not found after pulling it")

    # -- containers --------------------------------------------------------------------------------
    def create(self, spec: ContainerSpec, name: str) -> str:
        host_config = self._api.create_host_config(
            network_mode=spec.network_mode,
            # An init process as PID 1: the task's own process then gets SIGTERM with its default
            # action (PID 1 of a namespace ignores signals it has no handler for) and zombies are reaped.
            init=True,
            # Binds, not Mounts: a host path that does not exist yet (checkpoint storage before the
            # first checkpoint) is created, as `docker run -v` does, instead of failing the start.
            binds=[
                f"{m.host_path}:{m.container_path}:{'ro' if m.read_only else 'rw'},{m.propagation}"
                for m in spec.mounts
            ],
            devices=[d.docker_text() for d in spec.devices] or None,
            device_requests=(
                [
                    docker.types.DeviceRequest(
                        driver="nvidia", device_ids=list(spec.gpu_uuids), capabilities=[["gpu"]]
                    )
                ]
                if spec.gpu_uuids
                else None
            ),
            shm_size=spec.shm_size,
            cpu_shares=spec.cpu_shares or None,
            nano_cpus=spec.nano_cpus or None,
            cap_add=spec.cap_add or None,
            cap_drop=spec.cap_drop or None,
        )
        try:
            created = self._api.create_container(
                spec.image,
                command=spec.command,
                environment=spec.env,
                working_dir=spec.working_dir,
                labels=spec.labels,
                host_config=host_config,
                name=name,
                user=spec.user or None,
                stdin_open=False,
                tty=False,
            )
        except docker.errors.ImageNotFound as exc:
            raise ImageUnavailable(f"image {spec.image} not found: {exc.explanation or exc}") from exc
        return str(created["Id"])

    def copy_in(
        self,
        container_id: str,
        trees: Iterable[tuple[Path, str, Callable[[Path], bool]]],
        owner: tuple[int, int] | None = None,
    ) -> int:
        """Copy each (host folder, container folder, skip) into the container (before it starts):
        one tar, unpacked at "/", its entries owned by `owner` (uid, gid) where given (the task's
        linked account must write its working directory). Returns the number of entries."""
        buffer = io.BytesIO()
        count = 0
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for source, target, skip in trees:
                count += _add_tree(tar, source, target.strip("/"), skip, owner)
        self._api.put_archive(container_id, "/", buffer.getvalue())
        return count

    def add_account(self, container_id: str, spec: ContainerSpec) -> None:
        """Give the container's /etc/passwd and /etc/group the entries of the account it runs as
        (spec.user) where the image has none for its ids, before it starts."""
        owner = spec.owner()
        if owner is None or not spec.user_name:
            return
        uid, gid = owner
        changed: dict[str, bytes] = {}
        for name, number, line in (
            ("passwd", uid, f"{spec.user_name}:x:{uid}:{gid}:{spec.user_name}:{CONTAINER_WORKDIR}:/bin/sh"),
            ("group", gid, f"{spec.group_name}:x:{gid}:"),
        ):
            text = self._read_text(container_id, f"/etc/{name}")
            updated = with_account(text, number, line)
            if updated is not None:
                changed[name] = updated.encode()
        if not changed:
            return
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for name, data in changed.items():
                info = tarfile.TarInfo(f"etc/{name}")
                info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
                tar.addfile(info, io.BytesIO(data))
        self._api.put_archive(container_id, "/", buffer.getvalue())

    def _read_text(self, container_id: str, path: str) -> str:
        """A file of the (created) container as text; "" where the image has none."""
        try:
            stream, _ = self._api.get_archive(container_id, path)
        except docker.errors.NotFound:
            return ""
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = tar.next()
            extracted = tar.extractfile(member) if member is not None else None
            return extracted.read().decode(errors="replace") if extracted is not None else ""

    def start(self, container_id: str) -> None:
        self._api.start(container_id)

    def output(self, container_id: str) -> Iterator[tuple[str, bytes]]:
        """Every output frame of the container from its first, following it until it ends."""
        response = self._api.get(
            f"{self._api.base_url}/v{self._api.api_version}/containers/{container_id}/logs",
            params={"stdout": 1, "stderr": 1, "follow": 1},
            stream=True,
            timeout=None,
        )
        if response.status_code >= 400:
            raise docker.errors.APIError(f"logs of {container_id}: HTTP {response.status_code}", response)
        decoder = FrameDecoder()
        try:
            for chunk in response.iter_content(chunk_size=None):
                yield from decoder.feed(chunk)
        finally:
            response.close()

    def wait(self, container_id: str) -> ContainerEnd:
        self._api.wait(container_id, timeout=None)
        return self.end_of(container_id)

    def end_of(self, container_id: str) -> ContainerEnd:
        state = self._api.inspect_container(container_id)["State"]
        return ContainerEnd(
            exit_code=int(state.get("ExitCode") or 0),
            oom_killed=bool(state.get("OOMKilled")),
            error=str(state.get("Error") or ""),
            finished_at=time.time(),
        )

    def first_pid(self, container_id: str) -> int | None:
        """The host pid of the container's first process; None when it does not run."""
        try:
            pid = int(self._api.inspect_container(container_id)["State"].get("Pid") or 0)
        except docker.errors.NotFound:
            return None
        return pid or None

    def is_running(self, container_id: str) -> bool:
        state = self._api.inspect_container(container_id)["State"]
        return bool(state.get("Running")) or str(state.get("Status")) in ("created", "restarting")

    def signal(self, container_id: str, signal_name: str) -> bool:
        try:
            self._api.kill(container_id, signal=signal_name)
        except docker.errors.APIError:
            return False  # already stopped, or gone
        return True

    def remove(self, container_id: str) -> None:
        try:
            self._api.remove_container(container_id, force=True, v=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as error:
            # Another remover (the supervisor, a restart's cleanup) got there first: the end is the same.
            if not _removal_in_progress(error):
                raise

    def find(self, labels: Mapping[str, str]) -> list[dict[str, Any]]:
        """Containers (running or not) carrying every one of `labels`: their id, state and labels."""
        found = self._api.containers(all=True, filters={"label": [f"{k}={v}" for k, v in labels.items()]})
        return [{"id": c["Id"], "state": c.get("State", ""), "labels": c.get("Labels") or {}} for c in found]


def _removal_in_progress(error: docker.errors.APIError) -> bool:
    return error.status_code == 409 and "already in progress" in str(error.explanation or "")


def _owned(info: tarfile.TarInfo, owner: tuple[int, int] | None) -> tarfile.TarInfo:
    if owner is not None:
        info.uid, info.gid = owner
        info.uname = info.gname = ""  # by number: the names may not exist in the image
    return info


def _add_tree(
    tar: tarfile.TarFile,
    source: Path,
    target: str,
    skip: Callable[[Path], bool],
    owner: tuple[int, int] | None = None,
) -> int:
    count = 0
    if not source.is_dir():
        return count
    root_info = _owned(tar.gettarinfo(str(source), arcname=target), owner)
    tar.addfile(root_info)
    count += 1
    for path in sorted(source.rglob("*")):
        if skip(path):
            continue
        info = tar.gettarinfo(str(path), arcname=f"{target}/{path.relative_to(source).as_posix()}")
        _owned(info, owner)
        if info.isreg():
            with open(path, "rb") as f:
                tar.addfile(info, f)
        else:
            tar.addfile(info)
        count += 1
    return count


def pull_progress_line(item: Mapping[str, Any], last_shown: dict[tuple[str, str], float]) -> str:
    status = str(item.get("status") or "")
    if not status:
        return ""
    layer = str(item.get("id") or "")
    progress = str(item.get("progress") or "")
    if progress:
        key = (layer, status)
        now = time.monotonic()
        if now - last_shown.get(key, 0.0) < PULL_PROGRESS_INTERVAL_S:
            return ""
        last_shown[key] = now
    return " ".join(part for part in (f"{layer}:" if layer else "", status, progress) if part)

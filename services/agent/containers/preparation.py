"""Getting a container ready to launch: check the request against this agent, fetch and unpack the
model definition, expose mounts, and build the command line and environment."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cairn.tls import MASTER_CERT_PEM_ENV
from services.agent import task_accounts
from services.agent.containers import determined_info
from services.agent.containers.context_cache import ContextCache
from services.agent.containers.python_envs import PythonEnv, PythonEnvs
from services.agent.containers.startup_hook import with_startup_hook
from services.agent.containers.states import FailureType
from services.agent.containers.system_folders import covered_system_folder
from services.agent.containers.task_env import MasterFacts, task_environment
from services.agent.containers.task_shm import SHM_TARGET, ShmSizeError, ignored_pull_settings, shm_size
from services.agent.requests import StartRequest
from services.agent.runtime.context_archive import UnsafeArchiveError, unpack_context
from services.agent.runtime.docker_spec import CONTAINER_WORKDIR
from services.agent.runtime.private_mounts import Bind, in_private_mounts, read_only, tmpfs
from services.agent.runtime.protocol import META_DIR_NAME, ContainerPaths
from services.agent.slots import SlotInfo
from services.agent.task_user import TaskDirs, TaskUser, is_inside

# Fetches an allocation's model definition: the gzip'd tar, in chunks. Raises ContextFetchError.
ContextFetcher = Callable[[str], Iterable[bytes]]
# Writes a line about the container into its log: (message, level).
Note = Callable[[str, str], None]

SUPPORTED_RUNTIMES = ("", "process")
# A docker agent runs what the master asks of a process agent too: it is the agent's --runtime
# that decides where tasks run.
DOCKER_RUNTIMES = ("", "process", "docker")


class ContextFetchError(RuntimeError):
    """The master could not deliver the model definition; the message says why."""


class StartError(Exception):
    """The container cannot be started; it ends with `failure` and `message`."""

    def __init__(self, failure: FailureType, message: str) -> None:
        super().__init__(message)
        self.failure = failure
        self.message = message


@dataclass(frozen=True)
class Prepared:
    argv: list[str]
    env: dict[str, str]
    # The command's working directory: the container's folder, or with a task user its own folder
    # under the task root.
    cwd: Path


def command_line(entrypoint: tuple[str, ...], shell: bool) -> list[str]:
    """As Determined runs an entrypoint: a string through `sh -c`, a list exec'd as is."""
    return ["sh", "-c", entrypoint[0]] if shell else list(entrypoint)


class Preparer:
    def __init__(
        self,
        *,
        agent_id: str,
        slots: Iterable[SlotInfo],
        fetch_context: ContextFetcher,
        base_env: Mapping[str, str],
        python_envs: PythonEnvs | None = None,
        private_mounts: bool = False,
        in_docker: bool = False,
        task_dirs: TaskDirs | None = None,
        context_cache: ContextCache | None = None,
    ) -> None:
        # Docker runtime: the task runs in a container of its image, its files copied to Determined's
        # places there (the working dir, /run/determined), so nothing of the agent's host applies:
        # neither its environment nor its Python environments nor its paths.
        self._in_docker = in_docker
        # Tasks start in mount namespaces of their own (private_mounts.py; the agent is root).
        self._private_mounts = private_mounts
        self._agent_id = agent_id
        self._slots = {slot.id: slot for slot in slots}
        self._fetch_context = fetch_context
        self._context_cache = context_cache
        self._base_env = dict(base_env)
        self._python_envs = python_envs or PythonEnvs([])
        # Process runtime with --task-user: tasks run as that user in folders of their own.
        self._task_dirs = task_dirs

    def ended(self, container_id: str) -> None:
        """The container's command has ended: its /tmp goes (its working folder stays a while,
        with the container's own, for a look at what it left)."""
        if self._task_dirs is not None:
            self._task_dirs.remove_tmp(container_id)

    def discard(self, container_id: str) -> None:
        """Remove what the container's task left outside the container's folder (its task folder)."""
        if self._task_dirs is not None:
            self._task_dirs.remove(container_id)

    def problem(self, request: StartRequest) -> str | None:
        """Why this agent cannot run `request` at all, naming the field; None when it can."""
        supported = DOCKER_RUNTIMES if self._in_docker else SUPPORTED_RUNTIMES
        if request.runtime not in supported:
            return (
                f"start.spec.runtime: {request.runtime!r} is not supported by this agent "
                f"(it runs {'docker' if self._in_docker else 'process'!r})"
            )
        if not request.entrypoint or not request.entrypoint[0]:
            return "start.spec.entrypoint: required"
        if request.shell and len(request.entrypoint) != 1:
            return "start.spec.entrypoint: with shell, give exactly one command string"
        if len(set(request.slot_ids)) != len(request.slot_ids):
            return "start.slot_ids: a slot is listed twice"
        rendezvous = request.rendezvous
        if rendezvous is not None:
            count = len(rendezvous.container_addrs)
            if not 0 <= rendezvous.container_rank < count:
                return f"start.rendezvous.container_rank: {rendezvous.container_rank} is not in [0, {count})"
            if len(rendezvous.container_slot_counts) != count:
                return "start.rendezvous.container_slot_counts: one count per container address, please"
            if rendezvous.container_slot_counts[rendezvous.container_rank] != len(request.slot_ids):
                return (
                    "start.rendezvous.container_slot_counts: this container's count "
                    f"({rendezvous.container_slot_counts[rendezvous.container_rank]}) is not its "
                    f"{len(request.slot_ids)} slot ids"
                )
        unknown = [s for s in request.slot_ids if s not in self._slots]
        if unknown:
            have = ", ".join(sorted(self._slots)) or "none"
            return f"start.slot_ids: no slot {unknown[0]!r} on agent {self._agent_id} (slots: {have})"
        if request.run_as is not None:
            why = task_accounts.problem(request.run_as) or self._cannot_switch(request)
            if why:
                return why
        for mount in request.mounts:
            target = mount.container_path
            parts = Path(target).parts
            if target and not os.path.isabs(target) and (".." in parts or parts[0] == META_DIR_NAME):
                return f"start.spec.mounts: container_path {target!r} must stay inside the working directory"
            if not self._in_docker and os.path.isabs(target) and target != mount.host_path:
                covered = covered_system_folder(target)
                if covered is not None:
                    return (
                        f"start.spec.mounts: container_path {target!r} would cover {covered} of the agent's "
                        "machine (the process runtime binds in the host's filesystem); choose another path"
                    )
        return None

    def _cannot_switch(self, request: StartRequest) -> str | None:
        """Why this agent cannot run the request's linked account; None when it can."""
        run_as = request.run_as
        if self._in_docker or run_as is None:
            return None  # the container's user (docker --user)
        if self._task_dirs is not None:
            return None  # root with a task user: it switches to any account
        if (run_as.uid, run_as.gid) == (os.geteuid(), os.getegid()):
            return None  # the agent's own account: nothing to switch
        return (
            f"start.spec.run_as: this agent cannot run tasks as uid {run_as.uid} gid {run_as.gid} "
            f"(the account linked to the task's owner or workspace): switching users needs an agent "
            f"run as root with --task-user; it runs as uid {os.geteuid()}"
        )

    def _task_account(self, request: StartRequest) -> TaskUser | None:
        """The account the task runs as: its linked one, else the task user (None: the agent's own)."""
        if self._task_dirs is None or request.run_as is None:
            return self._task_dirs.user if self._task_dirs is not None else None
        return task_accounts.linked_user(request.run_as, self._task_dirs.user)

    def prepare(
        self,
        request: StartRequest,
        paths: ContainerPaths,
        master: MasterFacts,
        note: Note,
        aborted: Callable[[], bool],
    ) -> Prepared:
        task_dirs = None if self._in_docker else self._task_dirs
        account = None if self._in_docker else self._task_account(request)
        workdir = task_dirs.create(request.container_id, account) if task_dirs is not None else paths.root
        if request.has_context:
            self._fetch_and_unpack(request, paths, workdir, note, aborted)
        python_env = None
        base_env = {} if self._in_docker else self._base_env
        if account is not None and task_dirs is not None:
            base_env = {**base_env, **account.environment(workdir)}
        mount_binds: list[Bind] = []
        if not self._in_docker:
            mount_binds = self._expose_mounts(request, workdir, note)
            choice = self._python_envs.choose(request.image)
            if choice.note:
                note(choice.note, "WARNING")
            python_env = choice.env
            ignored = ignored_pull_settings(request.container_config)
            if ignored:
                note(
                    f"{' and '.join(ignored)}: the process runtime runs no image (the task runs in "
                    "a Python environment of the agent's machine); ignored",
                    "INFO",
                )
        env = task_environment(
            base=base_env,
            spec_environment=request.environment,
            agent_id=self._agent_id,
            container_id=request.container_id,
            slots=[self._slots[s] for s in request.slot_ids],
            workdir=Path(CONTAINER_WORKDIR) if self._in_docker else workdir,
            master=master,
            python_env=python_env,
            rendezvous=request.rendezvous,
        )
        if self._in_docker and "PATH" not in request.environment:
            del env["PATH"]  # the image's own PATH (its Python, its virtualenv) applies
        argv = command_line(request.entrypoint, request.shell)
        if request.has_context:
            argv = with_startup_hook(argv, workdir)
        binds: list[Bind] = []
        if determined_info.is_determined_task(env):
            binds += self._determined_surroundings(env, request, paths, workdir, note)
        if task_dirs is not None and account is not None:
            if request.run_as is not None:
                binds += self._account_files(request, paths, workdir, note)
                note(f"runs as {account.name} (uid {account.uid}, gid {account.gid}), as linked", "INFO")
            # Innermost: the privilege drop comes after the mounts, which need root.
            argv = account.run_as(argv)
            # Last: the folders bound before may lie under the host's /tmp.
            needed = self._host_paths_needed(workdir, request, python_env)
            binds += self._private_tmp(task_dirs.tmp_path(request.container_id), needed, env, note)
        if not self._in_docker:
            # After the private /tmp: a container path under /tmp must not be hidden by it (a host
            # path under /tmp keeps /tmp shared: _host_paths_needed).
            binds += mount_binds
            binds += self._private_shm(request, note)
        argv = in_private_mounts(argv, binds)
        if task_dirs is not None and account is not None:
            task_dirs.hand_over(workdir, account)
            if paths.run_determined.exists():
                task_dirs.hand_over(paths.run_determined, account)
        return Prepared(argv=argv, env=env, cwd=workdir)

    def _account_files(
        self, request: StartRequest, paths: ContainerPaths, workdir: Path, note: Note
    ) -> list[Bind]:
        """The linked account's entries in the task's /etc/passwd and /etc/group (Determined adds
        them to its containers'), where the machine lacks them and a private namespace is had."""
        assert request.run_as is not None
        if not self._private_mounts:
            if not task_accounts.known_uid(request.run_as.uid):
                note(
                    f"uid {request.run_as.uid} has no name on this machine and this agent cannot give "
                    "tasks a private mount namespace: the task cannot look its user name up",
                    "WARNING",
                )
            return []
        folder = paths.root / "accounts"
        folder.mkdir(exist_ok=True)
        return task_accounts.account_files(request.run_as, folder, workdir)

    @staticmethod
    def _host_paths_needed(
        workdir: Path, request: StartRequest, python_env: PythonEnv | None
    ) -> list[tuple[str, Path]]:
        """The host folders the task must see as they are, each with what it is for the note."""
        needed = [("the task root", workdir.parent)]
        if python_env is not None:
            needed.append((f"the Python environment {python_env.name!r}", python_env.prefix))
        needed += [(f"the mount {m.host_path}", Path(m.host_path)) for m in request.mounts if m.host_path]
        return needed

    def _private_tmp(
        self, tmp: Path, needed: list[tuple[str, Path]], env: dict[str, str], note: Note
    ) -> list[Bind]:
        """A task user's task gets a /tmp of its own (TaskDirs made the folder); where that cannot
        be had, at least TMPDIR leads there (fixed /tmp paths stay shared). A private /tmp would
        hide every host folder under /tmp: a clone under /tmp holds the task's virtualenv, say."""
        hidden = [(what, path) for what, path in needed if _under_tmp(path)]
        if not self._private_mounts:
            why = "this agent cannot give tasks a private mount namespace"
        elif hidden:
            what, path = hidden[0]
            why = f"{what} ({path}) is under /tmp, which a private /tmp would hide"
        else:
            env["TMPDIR"] = "/tmp"  # the agent's TMPDIR, if any, is not in the task's /tmp
            return [Bind(tmp, "/tmp")]
        env["TMPDIR"] = str(tmp)
        note(f"/tmp is shared with other tasks: {why}; TMPDIR is the task's own {tmp}", "WARNING")
        return []

    def _private_shm(self, request: StartRequest, note: Note) -> list[Bind]:
        """The task's own /dev/shm of the config's shm_size (task_shm.py), as a Docker container
        has; where the agent cannot make one, the host's, said in the task's log when the config
        asked for a size."""
        try:
            size, asked = shm_size(request.container_config)
        except ShmSizeError as exc:
            raise StartError(FailureType.TASK_ERROR, str(exc)) from exc
        if self._private_mounts:
            return [tmpfs(SHM_TARGET, size)]
        if asked:
            note(
                f"resources.shm_size ({size} bytes) is not applied: this agent cannot give tasks a "
                "private mount namespace (run it as root); /dev/shm is the host's, shared with other tasks",
                "WARNING",
            )
        return []

    def _determined_surroundings(
        self,
        env: dict[str, str],
        request: StartRequest,
        paths: ContainerPaths,
        workdir: Path,
        note: Note,
    ) -> list[Bind]:
        run_dir = paths.run_determined
        self._master_cert(env, run_dir)
        determined_info.write_info_files(env, run_dir, request.rendezvous)
        if request.has_context:
            determined_info.copy_model_definition(workdir, run_dir, skip=META_DIR_NAME)
        if self._in_docker:
            return []  # the docker runtime copies run_dir to the container's own /run/determined
        if not self._private_mounts:
            note(
                "Determined's harness will not find /run/determined/info: this agent cannot give tasks a "
                "private mount namespace (run it as root); Determined scripts run without cluster info",
                "WARNING",
            )
            return []
        return [Bind(run_dir, determined_info.RUN_DIR)]

    def _master_cert(self, env: dict[str, str], run_dir: Path) -> None:
        """Under TLS, Determined's harness and its `det` CLI verify the master with the CA file
        DET_MASTER_CERT_FILE names (the agent hands the CA over as text): written where Determined's
        containers have it, /run/determined/etc/ssl/master.crt, readable by the task."""
        pem = env.get(MASTER_CERT_PEM_ENV, "")
        env["DET_USE_TLS"] = "true" if pem else "false"
        if not pem:
            return
        cert = run_dir / determined_info.MASTER_CERT_PATH
        cert.parent.mkdir(parents=True, exist_ok=True)
        cert.write_text(pem)
        if self._in_docker or self._private_mounts:
            env["DET_MASTER_CERT_FILE"] = f"{determined_info.RUN_DIR}/{determined_info.MASTER_CERT_PATH}"
        elif self._task_dirs is None:
            env["DET_MASTER_CERT_FILE"] = str(cert)  # the task runs as the agent's user: it can read it
        # Else the task user could not reach the agent's folder: without a private /run/determined,
        # Determined scripts have no cluster info either (the note says so).

    def _fetch_and_unpack(
        self,
        request: StartRequest,
        paths: ContainerPaths,
        workdir: Path,
        note: Note,
        aborted: Callable[[], bool],
    ) -> None:
        digest = request.context_digest
        cache = self._context_cache
        kept = bool(digest) and cache is not None and cache.take(digest, paths.context_archive)
        if not kept:
            self._fetch(request, paths, note, aborted)
        try:
            count = unpack_context(paths.context_archive, workdir)
            size = paths.context_archive.stat().st_size
        except UnsafeArchiveError as exc:
            raise StartError(FailureType.TASK_ERROR, f"refused the model definition: {exc}") from exc
        except OSError as exc:
            raise StartError(FailureType.TASK_ERROR, f"cannot unpack the model definition: {exc}") from exc
        finally:
            paths.context_archive.unlink(missing_ok=True)
        where = "kept from an earlier container" if kept else "fetched"
        note(f"unpacked the model definition ({where}): {count} entries, {size} bytes", "INFO")

    def _fetch(
        self, request: StartRequest, paths: ContainerPaths, note: Note, aborted: Callable[[], bool]
    ) -> None:
        """Fetch the archive into the container's folder; keep it when its bytes are those the
        master named."""
        note("fetching the model definition from the master", "INFO")
        sha = hashlib.sha256()
        try:
            with open(paths.context_archive, "wb") as archive:
                for chunk in self._fetch_context(request.allocation_id):
                    if aborted():
                        raise StartError(FailureType.CONTAINER_ABORTED, "stopped before its command started")
                    archive.write(chunk)
                    sha.update(chunk)
        except ContextFetchError as exc:
            paths.context_archive.unlink(missing_ok=True)
            raise StartError(FailureType.TASK_ERROR, f"cannot fetch the model definition: {exc}") from exc
        except BaseException:
            paths.context_archive.unlink(missing_ok=True)
            raise
        digest = request.context_digest
        if not digest or self._context_cache is None:
            return
        if sha.hexdigest() == digest:
            self._context_cache.keep(digest, paths.context_archive)
        else:
            note(
                f"the model definition's bytes (SHA-256 {sha.hexdigest()}) are not those the master "
                f"named ({digest}): used, not kept",
                "WARNING",
            )

    def _expose_mounts(self, request: StartRequest, workdir: Path, note: Note) -> list[Bind]:
        """The mounts as the task sees them (Determined's bind_mounts): a relative container path
        becomes a link in the working directory (Determined's are relative to it); an absolute one
        that differs from the host path is bound there in the task's own mount namespace (read-only
        where asked), as a container would have it; without a namespace (the agent is not root)
        the task sees the host path only, and is told so."""
        binds: list[Bind] = []
        for mount in request.mounts:
            target = mount.container_path
            if not target or target == mount.host_path:
                continue
            if os.path.isabs(target):
                if self._private_mounts:
                    source = Path(mount.host_path)
                    binds.append(read_only(source, target) if mount.read_only else Bind(source, target))
                    continue
                note(
                    f"mount {mount.host_path} -> {target}: this agent cannot give tasks a private mount "
                    f"namespace (run it as root), so it cannot bind {target}; use {mount.host_path}",
                    "WARNING",
                )
                continue
            link = workdir / target
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.exists() and not link.is_symlink():
                link.symlink_to(mount.host_path)
        return binds


def _under_tmp(path: Path) -> bool:
    """Whether `path` lies under the host's /tmp, as written or once its links are followed (a
    virtualenv's folder itself is no link, but a folder on the way to it may be)."""
    tmp = Path("/tmp")
    return path == tmp or tmp in path.parents or is_inside(path, tmp)

"""The `local` provider: agents as processes on the master's own machine, one per instance, each in
its own session so that it outlives a master restart (the restarted master finds it again).

Each instance has a folder under the provider's root (<master state dir>/provisioner/<pool>/<id>,
owner only) holding its agent's work directory, its log and `instance.json`: the pid with the
process's start time, so that a pid reused by another process after a reboot is never taken for
the agent. That file is written before anything else can see the instance, and `launch` of an id
whose agent runs is a no-op: asking twice starts one agent.

Terminating sends SIGTERM (the agent stops its trials as its own shutdown: --kill-containers-on-exit)
and, when it is still there after TERM_GRACE_S, SIGKILL to its whole session.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from services.common.logging import get_logger
from services.master.domain.provisioning.provider import (
    JOIN_TOKEN_ENV,
    LaunchSpec,
    ProviderError,
    ProviderInstance,
    ProviderState,
)

log = get_logger(__name__)

RECORD = "instance.json"
TERM_GRACE_S = 30.0


def _start_ticks(pid: int) -> int | None:
    """The process's start time (clock ticks since boot), None when no such live process (a zombie
    counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        return None
    return int(fields[19])


class LocalProvider:
    name = "local"

    def __init__(self, pool: str, root: Path, agent_command: Sequence[str], env: Mapping[str, str]) -> None:
        """`agent_command`: the agent's command up to the flags each instance gets (its id, pool,
        slots, work directory); `env`: its whole environment (each launch adds its join token)."""
        self.pool = pool
        self.root = root
        self.agent_command = list(agent_command)
        self.env = dict(env)
        # Agents this master started, reaped here so that they do not linger as zombies.
        self._children: dict[str, subprocess.Popen[bytes]] = {}

    def _folder(self, instance_id: str) -> Path:
        if not instance_id or "/" in instance_id or instance_id.startswith("."):
            raise ProviderError(f"instance id {instance_id!r} is not a plain name")
        return self.root / instance_id

    def _read(self, folder: Path) -> dict[str, object] | None:
        try:
            data = json.loads((folder / RECORD).read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def _alive(self, data: Mapping[str, object] | None) -> bool:
        if not data:
            return False
        pid, ticks = data.get("pid"), data.get("start_ticks")
        return isinstance(pid, int) and ticks is not None and _start_ticks(pid) == ticks

    def _reap(self) -> None:
        for instance_id, child in list(self._children.items()):
            if child.poll() is not None:
                del self._children[instance_id]

    # ---- the contract ---------------------------------------------------------------------------

    def launch(self, spec: LaunchSpec) -> None:
        folder = self._folder(spec.instance_id)
        if self._alive(self._read(folder)):
            return  # asked again after a master restart: it runs already
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chmod(folder, 0o700)
            command = [
                *self.agent_command,
                "--agent-id",
                spec.instance_id,
                "--resource-pool",
                spec.resource_pool,
                "--slots",
                str(spec.slots),
                "--work-dir",
                str(folder / "work"),
            ]
            with open(folder / "agent.log", "ab") as out:
                child = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env={**self.env, JOIN_TOKEN_ENV: spec.join_token} if spec.join_token else self.env,
                    cwd=folder,
                    start_new_session=True,
                    close_fds=True,
                )
        except OSError as exc:
            raise ProviderError(f"cannot start an agent: {exc}") from None
        self._children[spec.instance_id] = child
        record = {"pid": child.pid, "start_ticks": _start_ticks(child.pid), "launched_at": time.time()}
        tmp = folder / f".{RECORD}.tmp"
        tmp.write_text(json.dumps(record))
        os.replace(tmp, folder / RECORD)
        log.info("local agent started", instance_id=spec.instance_id, pid=child.pid, pool=spec.resource_pool)

    def list(self) -> list[ProviderInstance]:
        self._reap()
        if not self.root.is_dir():
            return []
        found = []
        for folder in sorted(self.root.iterdir()):
            data = self._read(folder)
            if data is None:
                continue
            state = ProviderState.RUNNING if self._alive(data) else ProviderState.STOPPED
            found.append(ProviderInstance(id=folder.name, state=state))
        return found

    def terminate(self, instance_id: str) -> None:
        folder = self._folder(instance_id)
        data = self._read(folder)
        if not self._alive(data):
            return
        assert data is not None
        pid = int(data["pid"])  # type: ignore[call-overload]
        asked = data.get("terminate_asked_at")
        now = time.time()
        if isinstance(asked, int | float) and now - asked > TERM_GRACE_S:
            # It did not stop in time: its whole session (its trials included) is killed.
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            log.warning("local agent killed", instance_id=instance_id, pid=pid)
            return
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            return
        if asked is None:
            data["terminate_asked_at"] = now
            tmp = folder / f".{RECORD}.tmp"
            tmp.write_text(json.dumps(data))
            os.replace(tmp, folder / RECORD)
        log.info("local agent asked to stop", instance_id=instance_id, pid=pid)

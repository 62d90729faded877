"""Trial processes an agent left behind. Agents record each container's process in
<work dir>/containers/<id>/state.json ({"pid": ..., "pgid": ...}); once the agents are stopped,
any such process group still alive has nobody left to report to, and is killed."""

from __future__ import annotations

import json
import logging
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cairn.localcluster.processes import group_members, signal_group

log = logging.getLogger(__name__)

_SWEEP_WAIT_S = 5.0


@dataclass(frozen=True)
class SweptProcess:
    container: str
    pgid: int
    state_file: Path


def _recorded_group(state_file: Path) -> int | None:
    try:
        data = json.loads(state_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    for key in ("pgid", "pid"):
        value = data.get(key)
        if isinstance(value, int) and value > 1:
            return value
    return None


def container_state_files(work_dirs: Iterable[Path]) -> list[Path]:
    files: list[Path] = []
    for work_dir in work_dirs:
        files.extend(sorted(work_dir.glob("containers/*/state.json")))
    return files


def sweep_container_processes(work_dirs: Iterable[Path]) -> list[SweptProcess]:
    swept: list[SweptProcess] = []
    for state_file in container_state_files(work_dirs):
        pgid = _recorded_group(state_file)
        if pgid is None or not group_members(pgid):
            continue
        if signal_group(pgid, signal.SIGKILL):
            log.info("killed leftover trial process group pgid=%s state=%s", pgid, state_file)
            swept.append(SweptProcess(container=state_file.parent.name, pgid=pgid, state_file=state_file))
    deadline = time.monotonic() + _SWEEP_WAIT_S
    while time.monotonic() < deadline and any(group_members(item.pgid) for item in swept):
        time.sleep(0.05)
    return swept

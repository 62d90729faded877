"""Task ids as Determined's clients know them: a trial's task is "<experiment id>.<request id>" (the
trial's request id is a UUID), which `det task logs` accepts whole; an allocation of it is
"<experiment id>.<trial id>.<run>"."""

from __future__ import annotations

import re

from services.master.domain.kernel.errors import InvalidArgument

_TRIAL_TASK = re.compile(r"^(\d{1,18})\.([0-9a-fA-F-]{36})$")


def trial_task_id(experiment_id: int, request_id: str) -> str:
    return f"{experiment_id}.{request_id}"


def parse_trial_task_id(task_id: str) -> tuple[int, str]:
    """(experiment id, request id) of a trial's task id; InvalidArgument naming the field otherwise."""
    match = _TRIAL_TASK.match(task_id)
    if match is None:
        raise InvalidArgument(
            f"task_id: {task_id[:80]!r} is not a task id (a trial's is <experiment id>.<request id>)"
        )
    return int(match.group(1)), match.group(2).lower()

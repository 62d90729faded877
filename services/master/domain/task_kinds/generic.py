"""Generic tasks (Determined's `det task create`): a command that may be paused and unpaused
(its own routes), forked, and preempted like a trial (states.PREEMPTIBLE_KINDS). Its description
adds nothing to the generic lifecycle's."""

from __future__ import annotations

from services.master.domain.kernel.states import TaskKind
from services.master.domain.task_kinds.kind import KindDescription

GENERIC = KindDescription(kind=TaskKind.GENERIC)

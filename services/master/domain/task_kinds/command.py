"""Commands (Determined's `det cmd run`): the user's own entrypoint, run once to its end on the
slots it asks for (or on none), serving nothing. All a command is, the generic lifecycle is."""

from __future__ import annotations

from services.master.domain.kernel.states import TaskKind
from services.master.domain.task_kinds.kind import KindDescription

COMMAND = KindDescription(kind=TaskKind.COMMAND)

"""What the master tells a search about its trials (the contract's SearcherEvent), as plain values."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class ExitReason(enum.Enum):
    INVALID_HP = "INVALID_HP"
    USER_CANCELED = "USER_CANCELED"
    ERRORED = "ERRORED"
    INIT_INVALID_HP = "INIT_INVALID_HP"

    @property
    def invalid_hp(self) -> bool:
        return self in (ExitReason.INVALID_HP, ExitReason.INIT_INVALID_HP)


@dataclass(frozen=True)
class TrialCreated:
    request_id: str


@dataclass(frozen=True)
class ValidationCompleted:
    request_id: str
    metrics: dict[str, Any] = field(default_factory=dict)
    steps_completed: int = 0


@dataclass(frozen=True)
class TrialProgress:
    request_id: str
    # A fraction in [0, 1].
    progress: float


@dataclass(frozen=True)
class TrialExitedEarly:
    """Followed by the trial's TrialExited."""

    request_id: str
    reason: ExitReason


@dataclass(frozen=True)
class TrialExited:
    request_id: str


Event = TrialCreated | ValidationCompleted | TrialProgress | TrialExitedEarly | TrialExited

# The contract's field name of each event, for error messages ("event.trial_exited.request_id: ...").
EVENT_FIELDS: dict[type, str] = {
    TrialCreated: "trial_created",
    ValidationCompleted: "validation_completed",
    TrialProgress: "trial_progress",
    TrialExitedEarly: "trial_exited_early",
    TrialExited: "trial_exited",
}

"""What a search asks the master to do (the contract's SearcherAction), as plain values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CreateTrial:
    request_id: str
    # JSON values (they travel in a protobuf Struct), nested as the trial's hparams.
    hparams: dict[str, Any]
    # Below 2**31: Determined passes trial seeds to frameworks that take a signed int.
    trial_seed: int
    # Promotion mode: the length the trial trains to before it reports and exits (0: none).
    target_length: int = 0


@dataclass(frozen=True)
class StopTrial:
    request_id: str


@dataclass(frozen=True)
class SetTrialTarget:
    """Promotion: resume an idle trial from its latest checkpoint and train to a new length."""

    request_id: str
    target_length: int


@dataclass(frozen=True)
class Shutdown:
    """No further trials; `cancel` when every trial was canceled by the user, `failure` when every
    trial errored."""

    cancel: bool = False
    failure: bool = False


Action = CreateTrial | StopTrial | SetTrialTarget | Shutdown

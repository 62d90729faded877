"""What a search answers (the contract's SearcherAction), as plain values. TPE only ever creates
trials and shuts down: it never stops or promotes one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CreateTrial:
    request_id: str
    hparams: dict[str, Any]
    trial_seed: int


@dataclass(frozen=True)
class Shutdown:
    cancel: bool = False
    failure: bool = False


Action = CreateTrial | Shutdown

"""What PreviewSearch answers: the trials a spec would create, without a session."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PreviewedTrial:
    request_id: str
    hparams: dict[str, Any]
    # How far the trial trains, in `Preview.unit`: one length when it is fixed up front, the lengths
    # it reports at for a search that decides along the way (ASHA), none when unknown.
    lengths: tuple[int, ...] = ()
    bracket: int = 0


@dataclass(frozen=True)
class Preview:
    trials: list[PreviewedTrial]
    # The unit of the lengths (batches, records, epochs); empty when there are none.
    unit: str = ""

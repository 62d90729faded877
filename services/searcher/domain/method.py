"""The interface every search method implements, and the context it draws trials from.

A method owns only its own decisions and state. The searcher around it (searcher.py) keeps the
bookkeeping every method shares — which trials were requested, created, closed, canceled or
failed, their progress — decides when the search is over, and snapshots it all. The handlers
mirror the events; a promotion-based method answers with SetTrialTarget, a stopping one with
StopTrial, and both see validation metrics through `validation_completed`.
"""

from __future__ import annotations

import abc
import uuid
from collections.abc import Mapping, Set
from dataclasses import dataclass
from typing import Any

from cairn.searcher_plugin.actions import Action, CreateTrial
from cairn.searcher_plugin.events import ExitReason
from services.searcher.domain.hyperparameters import HyperparameterSpace
from services.searcher.domain.lengths import Length
from services.searcher.domain.rng import MersenneTwister

# Trial seeds are < 2**31 (Determined passes them to frameworks that take a signed int).
TRIAL_SEED_BOUND = 1 << 31


def new_request_id(rng: MersenneTwister) -> str:
    """A version-4 UUID made of 16 generator bytes (as Determined's model.NewRequestID)."""
    raw = bytearray(rng.read(16))
    raw[6] = (raw[6] & 0x0F) | 0x40
    raw[8] = (raw[8] & 0x3F) | 0x80
    return str(uuid.UUID(bytes=bytes(raw)))


@dataclass
class SearchContext:
    """The seeded generator and the hyperparameter space of one search."""

    rng: MersenneTwister
    space: HyperparameterSpace

    def sample(self) -> dict[str, Any]:
        return self.space.sample(self.rng)

    def create_trial(self, hparams: dict[str, Any], target_length: int = 0) -> CreateTrial:
        # Draw order matters for reproducibility: the hyperparameters (drawn by the caller), then
        # the request id, then the trial seed.
        request_id = new_request_id(self.rng)
        trial_seed = self.rng.intn(TRIAL_SEED_BOUND)
        return CreateTrial(request_id, hparams, trial_seed, target_length)


@dataclass(frozen=True)
class TrialPlan:
    """What a preview knows of one trial before it runs.

    `lengths`: how far it trains, when that is fixed up front (a legacy max_length). `rungs`: for a
    search that decides at validations (ASHA), the lengths at which it decides; how many of them the
    trial reaches depends on its results, which a preview simulates. `bracket`: its bracket.
    """

    lengths: tuple[int, ...] = ()
    rungs: tuple[int, ...] = ()
    bracket: int = 0


class SearchMethod(abc.ABC):
    """One search algorithm. Handlers return the actions to take; they may draw from ctx.rng."""

    @abc.abstractmethod
    def initial_trials(self, ctx: SearchContext) -> list[Action]: ...

    def trial_created(self, ctx: SearchContext, request_id: str) -> list[Action]:
        return []

    def validation_completed(
        self, ctx: SearchContext, request_id: str, metrics: Mapping[str, Any], steps_completed: int
    ) -> list[Action]:
        return []

    def trial_exited_early(self, ctx: SearchContext, request_id: str, reason: ExitReason) -> list[Action]:
        return []

    def trial_exited(self, ctx: SearchContext, request_id: str) -> list[Action]:
        return []

    @abc.abstractmethod
    def progress(self, trial_progress: Mapping[str, float], trials_closed: Set[str]) -> float:
        """The search's progress in [0, 1], from each live trial's fraction and the closed trials."""

    @abc.abstractmethod
    def to_state(self) -> dict[str, Any]:
        """The method's own state as JSON-ready data."""

    @abc.abstractmethod
    def load_state(self, state: Mapping[str, Any]) -> None:
        """Take back what `to_state` gave (raise InvalidSnapshot when it cannot)."""

    # --- preview ------------------------------------------------------------------------------

    def length_unit(self) -> str:
        """The unit trial lengths are measured in; empty when the method sets none."""
        return ""

    def trial_plan(self, request_id: str) -> TrialPlan:
        return TrialPlan()


def legacy_plan(length: Length | None) -> TrialPlan:
    return TrialPlan(lengths=(length.units,)) if length is not None else TrialPlan()

"""The trials a spec would create, found by running its search against a simulated master.

The simulated master creates every requested trial at once and lets running trials finish one at
a time, oldest first, until the search shuts down. Methods that decide on validation metrics
(ASHA) will need the simulation to report metrics too; random, grid and single do not read them.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from services.searcher.domain.actions import Action, CreateTrial, Shutdown
from services.searcher.domain.errors import InvalidSpec
from services.searcher.domain.events import TrialCreated, TrialExited
from services.searcher.domain.registry import MethodRegistry
from services.searcher.domain.searcher import Searcher
from services.searcher.domain.spec import SearchSpec

# A preview lists every trial in one message; past this it is no longer a preview.
MAX_PREVIEW_TRIALS = 100_000


@dataclass(frozen=True)
class PreviewedTrial:
    request_id: str
    hparams: dict[str, Any]
    lengths: tuple[int, ...]
    bracket: int


@dataclass(frozen=True)
class Preview:
    trials: list[PreviewedTrial]
    unit: str


def preview(spec: SearchSpec, registry: MethodRegistry) -> Preview:
    searcher = Searcher.new(spec, registry)
    trials: list[PreviewedTrial] = []
    running: deque[str] = deque()
    finished = False

    def take(actions: list[Action]) -> None:
        nonlocal finished
        for action in actions:
            if isinstance(action, Shutdown):
                finished = True
            elif isinstance(action, CreateTrial):
                if len(trials) >= MAX_PREVIEW_TRIALS:
                    raise InvalidSpec(
                        f"searcher: the search creates more than {MAX_PREVIEW_TRIALS} trials, "
                        "too many to preview"
                    )
                plan = searcher.method.trial_plan(action.request_id)
                trials.append(PreviewedTrial(action.request_id, action.hparams, plan.lengths, plan.bracket))
                running.append(action.request_id)
                take(searcher.apply(TrialCreated(action.request_id)))

    take(searcher.initial_trials())
    while running and not finished:
        take(searcher.apply(TrialExited(running.popleft())))
    return Preview(trials, searcher.method.length_unit())

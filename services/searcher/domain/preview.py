"""The trials a spec would create, found by running its search against a simulated master.

The simulated master creates every requested trial at once and gives running trials turns, oldest
first, until the search shuts down:

- A trial whose plan has no rungs (single, random, grid) trains to its end in its turn and exits.
- A trial with rungs (ASHA) trains, in its turn, to its next length — the target the search set
  (promotion mode), or else the next rung — and reports a validation there carrying the searcher
  metric and the time metric. A stopped trial exits; in stopping mode a trial that was not stopped
  waits for its next turn; in promotion mode it waits idle until promoted.

Assumption: the metric values are synthetic. Each trial gets one value, uniform in [0, 1), fixed for
its whole life, drawn in creation order from a generator seeded with the experiment seed but separate
from the search's own, so the search draws what a real session draws (the first trials are the
same ones) and the same spec always previews the same. Real results order trials differently, so
past the first trials a preview shows the shape of a search (how many trials, how far each goes),
not its outcome.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cairn.searcher_plugin.actions import Action, CreateTrial, SetTrialTarget, Shutdown, StopTrial
from cairn.searcher_plugin.errors import InvalidSpec
from cairn.searcher_plugin.events import TrialCreated, TrialExited, ValidationCompleted
from cairn.searcher_plugin.preview import Preview, PreviewedTrial
from cairn.searcher_plugin.spec import SearchSpec
from services.searcher.domain.method import TrialPlan
from services.searcher.domain.registry import MethodRegistry
from services.searcher.domain.rng import MersenneTwister
from services.searcher.domain.searcher import Searcher

# A preview lists every trial in one message; past this it is no longer a preview.
MAX_PREVIEW_TRIALS = 100_000


@dataclass
class _SimulatedTrial:
    request_id: str
    hparams: dict[str, Any]
    plan: TrialPlan
    metric: float
    # Promotion mode: the length to train to next (0: none set, or reached).
    target: int
    # The lengths at which it reported, in order.
    reached: list[int] = field(default_factory=list)
    ended: bool = False

    def next_length(self) -> int | None:
        if self.target:
            return self.target
        done = len(self.reached)
        return self.plan.rungs[done] if done < len(self.plan.rungs) else None

    def previewed(self) -> PreviewedTrial:
        lengths = tuple(self.reached) if self.plan.rungs else self.plan.lengths
        return PreviewedTrial(self.request_id, self.hparams, lengths, self.plan.bracket)


# The synthetic metric of the n-th trial created (counting from 0).
MetricSource = Callable[[int], float]


def seeded_metrics(seed: int) -> MetricSource:
    rng = MersenneTwister(seed)
    return lambda _: rng.unit_interval()


class _SimulatedMaster:
    def __init__(self, spec: SearchSpec, searcher: Searcher, metric_of: MetricSource) -> None:
        self.searcher = searcher
        self.metric_of = metric_of
        self.metric_name = str(spec.searcher.get("metric", ""))
        self.time_unit = searcher.method.length_unit()
        self.trials: dict[str, _SimulatedTrial] = {}
        self.running: deque[str] = deque()
        self.finished = False

    def take(self, actions: list[Action]) -> None:
        stopped = []
        for action in actions:
            if isinstance(action, Shutdown):
                self.finished = True
            elif isinstance(action, CreateTrial):
                self._create(action)
            elif isinstance(action, SetTrialTarget):
                self.trials[action.request_id].target = action.target_length
                self.running.append(action.request_id)
            elif isinstance(action, StopTrial):
                stopped.append(action.request_id)
        for rid in stopped:
            self._end(rid)

    def _create(self, action: CreateTrial) -> None:
        if len(self.trials) >= MAX_PREVIEW_TRIALS:
            raise InvalidSpec(
                f"searcher: the search creates more than {MAX_PREVIEW_TRIALS} trials, too many to preview"
            )
        rid = action.request_id
        plan = self.searcher.method.trial_plan(rid)
        metric = self.metric_of(len(self.trials))
        self.trials[rid] = _SimulatedTrial(rid, action.hparams, plan, metric, action.target_length)
        self.running.append(rid)
        self.take(self.searcher.apply(TrialCreated(rid)))

    def _end(self, request_id: str) -> None:
        trial = self.trials[request_id]
        if trial.ended:
            return
        trial.ended = True
        if request_id in self.running:
            self.running.remove(request_id)
        self.take(self.searcher.apply(TrialExited(request_id)))

    def turn(self) -> None:
        trial = self.trials[self.running.popleft()]
        length = trial.next_length() if trial.plan.rungs else None
        if length is None:
            self._end(trial.request_id)
            return
        trial.reached.append(length)
        promotion_mode = bool(trial.target)
        trial.target = 0
        metrics = {self.metric_name: trial.metric, self.time_unit: length}
        self.take(self.searcher.apply(ValidationCompleted(trial.request_id, metrics, length)))
        if not promotion_mode and not trial.ended and trial.request_id not in self.running:
            self.running.append(trial.request_id)


def preview(spec: SearchSpec, registry: MethodRegistry, metric_of: MetricSource | None = None) -> Preview:
    """`metric_of` replaces the seeded synthetic metrics (to replay a scripted search)."""
    searcher = Searcher.new(spec, registry)
    master = _SimulatedMaster(spec, searcher, metric_of or seeded_metrics(spec.seed))
    master.take(searcher.initial_actions())
    while master.running and not master.finished:
        master.turn()
    return Preview([t.previewed() for t in master.trials.values()], searcher.method.length_unit())

"""The figures of bench/fairness.py, computed from what the simulated agents saw (each run's start,
end and slots) and what the bench asked for (each experiment's creation and trials): pure
functions over piecewise-constant timelines, so that they are tested apart from any cluster.

- Entitlement: the pool's slots divided among the workspaces that want slots by weighted max-min
  ("water-filling": in proportion to weight, never more than a workspace wants, what one does not
  want going to the others), recomputed whenever demand changes. It is the static-weight ideal: it
  ignores fair share's recent-usage factor on purpose, so that both schedulers are judged against
  the same target.
- A workspace is backlogged while it wants more slots than it holds (some of its trials wait).
- Its share while backlogged: slot-seconds held over slot-seconds entitled, over the moments it is
  backlogged (1.0: exactly its entitlement). Jain's index over those ratios of the workspaces that
  were ever backlogged: (sum x)^2 / (n sum x^2), 1.0 when all are equal, 1/n at worst.
- Time to entitlement: from a burst's arrival to the first moment its workspace holds its
  entitlement (less a gang's slack: a workspace of four-slot trials cannot hold 15 of 16 slots), or
  is no longer backlogged.
- Utilization while anything waits: slots held over slots in the pool, over the moments some
  workspace is backlogged.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Run:
    """One run of a trial on one agent (a container), as its simulated agent saw it."""

    workspace: str
    experiment_id: int
    trial_id: int
    slots: int
    start: float
    end: float
    # It ran its trial to the end.
    completed: bool
    # It was stopped by a preemption (the trial checkpointed earlier and is queued again).
    preempted: bool = False
    # Slot-seconds trained since its last checkpoint when it was stopped (0 when it completed).
    lost_slot_seconds: float = 0.0
    # The master's allocation it ran for ("" when not known).
    allocation_id: str = ""


@dataclass(frozen=True)
class Burst:
    """An experiment the bench created: `trials` trials of `slots` slots each."""

    workspace: str
    experiment_id: int
    at: float
    trials: int
    slots: int


@dataclass
class WorkspaceFigures:
    backlogged_s: float = 0.0
    held_slot_s: float = 0.0
    entitled_slot_s: float = 0.0
    # Seconds from each burst's arrival to the workspace holding its entitlement; inf: not within
    # the window.
    to_entitlement_s: list[float] = field(default_factory=list)

    @property
    def share_ratio(self) -> float:
        return self.held_slot_s / self.entitled_slot_s if self.entitled_slot_s > 0 else float("nan")


@dataclass
class Figures:
    window_s: float
    capacity: int
    workspaces: dict[str, WorkspaceFigures]
    jain: float
    any_backlogged_s: float
    utilization_while_waiting: float
    preemptions: int
    lost_slot_seconds: float
    to_entitlement_p50_s: float
    to_entitlement_p95_s: float
    # Bursts whose workspace never held its entitlement within the window.
    never_entitled: int


def water_fill(
    capacity: float, demand: Mapping[str, float], weights: Mapping[str, float]
) -> dict[str, float]:
    """Weighted max-min shares of `capacity` for `demand` (real numbers): each key gets
    min(demand, level * weight), the level chosen so that they add up to min(capacity, total
    demand). Keys without demand get 0."""
    shares = dict.fromkeys(demand, 0.0)
    wanting = sorted((key for key, d in demand.items() if d > 0), key=lambda k: demand[k] / weights[k])
    left = float(capacity)
    weight_left = sum(weights[k] for k in wanting)
    for i, key in enumerate(wanting):
        level = left / weight_left if weight_left > 0 else 0.0
        if demand[key] <= level * weights[key]:
            shares[key] = float(demand[key])
        else:
            # Every key from here on wants more than its part at this level: share by weight.
            for rest in wanting[i:]:
                shares[rest] = level * weights[rest]
            return shares
        left -= shares[key]
        weight_left -= weights[key]
    return shares


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index: 1.0 when all values are equal, 1/n when one has everything; nan for
    no values."""
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return float("nan")
    squares = sum(v * v for v in values)
    if squares == 0:
        return 1.0
    return sum(values) ** 2 / (len(values) * squares)


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile by linear interpolation between order statistics (inf counts as largest);
    nan for no values."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    position = q * (len(ordered) - 1)
    low, high = math.floor(position), math.ceil(position)
    if ordered[high] == float("inf"):
        return float("inf") if position > low or ordered[low] == float("inf") else ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True)
class _Segment:
    start: float
    end: float
    held: dict[str, int]
    demand: dict[str, int]


def _segments(runs: Sequence[Run], bursts: Sequence[Burst], window_s: float) -> list[_Segment]:
    """The window cut at every change of what a workspace holds or wants."""
    changes: dict[float, list[tuple[str, str, int]]] = defaultdict(list)
    for b in bursts:
        changes[max(0.0, b.at)].append(("demand", b.workspace, b.trials * b.slots))
    for r in runs:
        changes[max(0.0, r.start)].append(("held", r.workspace, r.slots))
        changes[max(0.0, r.end)].append(("held", r.workspace, -r.slots))
        if r.completed:
            changes[max(0.0, r.end)].append(("demand", r.workspace, -r.slots))
    workspaces = sorted({b.workspace for b in bursts} | {r.workspace for r in runs})
    held = dict.fromkeys(workspaces, 0)
    demand = dict.fromkeys(workspaces, 0)
    times = sorted(t for t in changes if t < window_s)
    segments = []
    for i, t in enumerate(times):
        for kind, workspace, delta in changes[t]:
            (held if kind == "held" else demand)[workspace] += delta
        end = times[i + 1] if i + 1 < len(times) else window_s
        if end > t:
            segments.append(_Segment(t, end, dict(held), dict(demand)))
    return segments


def figures(
    runs: Sequence[Run],
    bursts: Sequence[Burst],
    weights: Mapping[str, float],
    capacity: int,
    window_s: float,
) -> Figures:
    """Everything the module docstring describes, over [0, window_s) (times in seconds from the
    workload's start). A completed run's trial leaves its workspace's demand when the run ends (a
    gang of several containers: once per container, each with its own slots)."""
    segments = _segments(runs, bursts, window_s)
    per = {w: WorkspaceFigures() for w in sorted({b.workspace for b in bursts})}
    any_backlogged = busy_while_waiting = 0.0
    # Pending bursts for time to entitlement: (burst, slack), resolved at the first segment where
    # the workspace holds its entitlement less the slack, or is not backlogged.
    waiting: list[Burst] = sorted(bursts, key=lambda b: b.at)
    for seg in segments:
        duration = seg.end - seg.start
        entitled = water_fill(capacity, seg.demand, weights)
        backlogged = {w for w in per if seg.demand.get(w, 0) > seg.held.get(w, 0)}
        for w in backlogged:
            per[w].backlogged_s += duration
            per[w].held_slot_s += seg.held.get(w, 0) * duration
            per[w].entitled_slot_s += entitled.get(w, 0.0) * duration
        if backlogged:
            any_backlogged += duration
            busy_while_waiting += sum(seg.held.values()) * duration
        still = []
        for b in waiting:
            if b.at > seg.start:
                still.append(b)
                continue
            target = math.floor(entitled.get(b.workspace, 0.0) + 1e-9) - (b.slots - 1)
            if b.workspace not in backlogged or seg.held.get(b.workspace, 0) >= target:
                per[b.workspace].to_entitlement_s.append(max(0.0, seg.start - b.at))
            else:
                still.append(b)
        waiting = still
    for b in waiting:
        if b.at < window_s:
            per[b.workspace].to_entitlement_s.append(float("inf"))
    delays = [d for f in per.values() for d in f.to_entitlement_s]
    stopped = [r for r in runs if r.preempted and r.end < window_s]
    return Figures(
        window_s=window_s,
        capacity=capacity,
        workspaces=per,
        jain=jain_index([f.share_ratio for f in per.values() if f.backlogged_s > 0]),
        any_backlogged_s=any_backlogged,
        utilization_while_waiting=(
            busy_while_waiting / (capacity * any_backlogged) if any_backlogged > 0 else float("nan")
        ),
        preemptions=len(stopped),
        lost_slot_seconds=sum(r.lost_slot_seconds for r in stopped),
        to_entitlement_p50_s=quantile(delays, 0.5),
        to_entitlement_p95_s=quantile(delays, 0.95),
        never_entitled=sum(1 for d in delays if d == float("inf")),
    )


def lost_since_checkpoint(elapsed_s: float, checkpoint_every_s: float) -> float:
    """Seconds trained since the run's last checkpoint, for a run that checkpoints every
    `checkpoint_every_s` seconds from its start and is stopped after `elapsed_s`."""
    if checkpoint_every_s <= 0:
        return max(0.0, elapsed_s)
    return max(0.0, elapsed_s - math.floor(elapsed_s / checkpoint_every_s + 1e-9) * checkpoint_every_s)


@dataclass(frozen=True)
class ForecastSample:
    """A waiting experiment's forecast start as the job listing gave it, in seconds into the window:
    when the listing was asked for, the start it forecast, and when that forecast was made (None:
    the listing did not say)."""

    asked: float
    experiment_id: int
    predicted: float
    # What the listing said it waits for (predicted_after).
    after: str = ""
    made: float | None = None

    @property
    def origin(self) -> float:
        """The moment the forecast speaks from: when it was made, or when it was asked for if it
        was made before (a forecast kept from earlier answers for the moment it is read)."""
        return self.asked if self.made is None else max(self.asked, self.made)


@dataclass(frozen=True)
class ForecastError:
    """One forecast against what happened: its experiment's next start after the forecast's
    origin, the wait from the origin to that start, and the error as a part of that wait."""

    experiment_id: int
    origin: float
    predicted: float
    actual: float

    @property
    def wait(self) -> float:
        return self.actual - self.origin

    @property
    def absolute_s(self) -> float:
        return abs(self.predicted - self.actual)

    @property
    def relative(self) -> float:
        return self.absolute_s / self.wait


def forecast_errors(
    samples: Sequence[ForecastSample], runs: Sequence[Run], min_wait_s: float = 1.0
) -> list[ForecastError]:
    """Each sample against its experiment's actual next start: the first run of any of its trials
    that started at or after the sample's origin (ForecastSample.origin). The error is
    |predicted - actual| as a part of the wait from the origin to that start (ForecastError).
    Samples whose experiment did not start again within the runs, or started within `min_wait_s`
    (a forecast of "now" says little, and the part of a wait under a second is mostly the
    reading's own latency), are left out."""
    starts: dict[int, list[float]] = defaultdict(list)
    for run in runs:
        starts[run.experiment_id].append(run.start)
    for values in starts.values():
        values.sort()
    errors = []
    for sample in samples:
        origin = sample.origin
        later = [s for s in starts.get(sample.experiment_id, []) if s >= origin]
        if not later:
            continue
        error = ForecastError(sample.experiment_id, origin, sample.predicted, later[0])
        if error.wait < min_wait_s:
            continue
        errors.append(error)
    return errors

"""How long each live trial allocation is expected to run, for the start forecast
(start_forecast.py): a running one, what is left of its run; a waiting one, its whole run; and what
a run costs again if it is preempted and restarted.

From what trial code reports (its progress: the part of the searcher's length done, 0 to 1) and
when (metrics/progress.py keeps the time of the latest report and the first report of the current
run):
- a run's pace: progress per second between its first report and its latest. Not the trial's whole
  progress over the run's time: a run resumed from a checkpoint starts part way.
- a running trial with a pace: what is left at that pace, less the time since its latest report
  (the report is not the moment);
- a running trial without one yet (fewer than two reports in this run, or too close together),
  and a waiting trial: its experiment's typical pace (the median of its trials' paces) over what
  is left of its trial, after the experiment's typical start-up (from a run's start to its first
  report);
- an experiment whose trials report no progress: the typical whole run of its finished trials
  (their last runs), less what has run;
- commands, notebooks, shells and TensorBoards: unknown (they end when someone ends them, or
  idle). Unknown means it does not end within the forecast.
A restart costs the start-up again: a preempted run resumes from its checkpoint, which the
master does not see, so the work lost since is not counted.

And how long a preempted allocation keeps its slots (its code checkpoints and exits): per pool, the
median of its latest scheduler preemptions within the last hour, from the request to the end.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import and_, select
from sqlalchemy.orm import Session

from services.master.domain.kernel.states import PLACED_ALLOCATION, RunState
from services.master.domain.kernel.states import AllocationState as A
from services.master.domain.scheduling.scheduling import SCHEDULER_PREEMPTION
from services.master.store import models

# A pace needs this long between a run's first report and its latest (reports closer together say
# more about when they were sent than about the run).
MIN_PACE_SPAN_S = 1.0
# Below this progress a run's elapsed time says too little to project from (the fallback for
# reports without times, from before the forecast kept them).
_MIN_PROGRESS = 0.02
# The paces an experiment's typical pace is taken from: its latest trials'.
_PACE_SAMPLE = 200
# A pool's release time is the median of its latest this many scheduler preemptions in the window.
_RELEASE_SAMPLE = 50
_RELEASE_WINDOW = timedelta(hours=1)


@dataclass(frozen=True)
class TrialRun:
    """A live trial allocation and what its trial reported."""

    allocation_id: str
    experiment_id: int
    placed: bool
    # The allocation's run of its trial, and when it started (placed ones).
    run_id: int
    start_time: datetime | None
    progress: float
    progress_at: datetime | None
    pace_run_id: int | None
    pace_progress: float | None
    pace_at: datetime | None


@dataclass(frozen=True)
class Pace:
    """A run's measured pace: progress per second from its first report; when it first reported."""

    per_second: float
    first_report: datetime


@dataclass(frozen=True)
class Expected:
    # Allocation -> seconds (running: left; waiting: whole run).
    seconds: dict[str, float]
    # Allocation -> seconds a restart costs on top (its start-up).
    restart_seconds: dict[str, float]


def pace_of(
    run_id: int,
    progress: float,
    progress_at: datetime | None,
    pace_run_id: int | None,
    pace_progress: float | None,
    pace_at: datetime | None,
) -> Pace | None:
    """The pace of run `run_id` from its trial's columns; None when not measured (yet)."""
    if pace_run_id != run_id or pace_progress is None or pace_at is None or progress_at is None:
        return None
    span = (progress_at - pace_at).total_seconds()
    done = progress - pace_progress
    if span < MIN_PACE_SPAN_S or done <= 0:
        return None
    return Pace(done / span, pace_at)


@dataclass(frozen=True)
class Typical:
    """An experiment's typical run, from its trials' measured paces and finished runs."""

    # Progress per second; None: none measured.
    per_second: float | None
    # From a run's start to its first report.
    start_up_s: float
    # Its finished trials' last runs, whole; None: none finished.
    whole_run_s: float | None


def typical_runs(
    paces: Iterable[tuple[int, float, float | None]],
    whole_runs: Iterable[tuple[int, float]],
) -> dict[int, Typical]:
    """By experiment: the median of `paces` ((experiment, progress per second, start-up seconds or
    None)) and the mean of `whole_runs` ((experiment, seconds))."""
    rates: dict[int, list[float]] = defaultdict(list)
    start_ups: dict[int, list[float]] = defaultdict(list)
    wholes: dict[int, list[float]] = defaultdict(list)
    for experiment_id, per_second, start_up in paces:
        rates[experiment_id].append(per_second)
        if start_up is not None:
            start_ups[experiment_id].append(start_up)
    for experiment_id, seconds in whole_runs:
        wholes[experiment_id].append(seconds)
    typical = {}
    for experiment_id in set(rates) | set(wholes):
        typical[experiment_id] = Typical(
            statistics.median(rates[experiment_id]) if rates[experiment_id] else None,
            statistics.median(start_ups[experiment_id]) if start_ups[experiment_id] else 0.0,
            statistics.fmean(wholes[experiment_id]) if wholes[experiment_id] else None,
        )
    return typical


def estimate(runs: Iterable[TrialRun], typical: dict[int, Typical], now: datetime) -> Expected:
    """Each run's expected seconds and restart cost (module docstring)."""
    seconds: dict[str, float] = {}
    restart: dict[str, float] = {}
    for run in runs:
        usual = typical.get(run.experiment_id, Typical(None, 0.0, None))
        left = _left(run, usual, now) if run.placed else _whole(run, usual)
        if left is not None:
            seconds[run.allocation_id] = max(0.0, left)
            restart[run.allocation_id] = usual.start_up_s
    return Expected(seconds, restart)


def _left(run: TrialRun, usual: Typical, now: datetime) -> float | None:
    if run.start_time is None:
        return None
    elapsed = (now - run.start_time).total_seconds()
    reported_here = run.pace_run_id == run.run_id and run.progress_at is not None
    own = pace_of(run.run_id, run.progress, run.progress_at, run.pace_run_id, run.pace_progress, run.pace_at)
    rate = own.per_second if own is not None else usual.per_second
    if rate is not None and reported_here and run.progress_at is not None:
        return (1.0 - run.progress) / rate - (now - run.progress_at).total_seconds()
    if rate is not None:
        # No report in this run yet: it resumes where its trial last reported, after start-up.
        return usual.start_up_s + (1.0 - run.progress) / rate - elapsed
    if run.progress >= _MIN_PROGRESS and run.pace_run_id is None and elapsed > 0:
        # Reports from before paces were kept: the run's whole projected from its progress.
        return elapsed * (1.0 - run.progress) / run.progress
    if usual.whole_run_s is not None:
        return usual.whole_run_s - elapsed
    return None


def _whole(run: TrialRun, usual: Typical) -> float | None:
    if usual.per_second is not None:
        return usual.start_up_s + (1.0 - run.progress) / usual.per_second
    if usual.whole_run_s is not None:
        return usual.whole_run_s * (1.0 - min(run.progress, 1.0))
    return None


def expected_runs(s: Session, now: datetime) -> Expected:
    """The live trial allocations' expected runs, read from the database."""
    a, t = models.Allocation, models.Trial
    live = [
        TrialRun(
            allocation_id=row.id,
            experiment_id=row.experiment_id,
            placed=row.state in PLACED_ALLOCATION,
            run_id=row.run_id,
            start_time=row.start_time,
            progress=row.progress or 0.0,
            progress_at=row.progress_at,
            pace_run_id=row.pace_run_id,
            pace_progress=row.pace_progress,
            pace_at=row.pace_at,
        )
        for row in s.execute(
            select(
                a.id,
                a.state,
                a.run_id,
                a.start_time,
                t.experiment_id,
                t.progress,
                t.progress_at,
                t.pace_run_id,
                t.pace_progress,
                t.pace_at,
            )
            .join(t, t.id == a.trial_id)
            .where(a.state.in_([A.PENDING, *PLACED_ALLOCATION]))
        )
    ]
    experiments = {run.experiment_id for run in live}
    if not experiments:
        return Expected({}, {})
    return estimate(live, typical_runs(_paces(s, experiments), _whole_runs(s, experiments)), now)


def _paces(s: Session, experiments: set[int]) -> list[tuple[int, float, float | None]]:
    """(experiment, pace, start-up) of the experiments' trials with a measured pace, the latest
    _PACE_SAMPLE of each experiment by their first report."""
    a, t = models.Allocation, models.Trial
    rows = s.execute(
        select(
            t.experiment_id,
            t.progress,
            t.progress_at,
            t.pace_run_id,
            t.pace_progress,
            t.pace_at,
            a.start_time,
        )
        .outerjoin(a, and_(a.trial_id == t.id, a.run_id == t.pace_run_id))
        .where(t.experiment_id.in_(experiments), t.pace_at.is_not(None))
    )
    found: dict[int, list[tuple[datetime, float, float | None]]] = defaultdict(list)
    for experiment_id, progress, progress_at, pace_run_id, pace_progress, pace_at, start in rows:
        if pace_run_id is None:
            continue
        pace = pace_of(pace_run_id, progress or 0.0, progress_at, pace_run_id, pace_progress, pace_at)
        if pace is None:
            continue
        start_up = max(0.0, (pace.first_report - start).total_seconds()) if start is not None else None
        found[experiment_id].append((pace.first_report, pace.per_second, start_up))
    paces: list[tuple[int, float, float | None]] = []
    for experiment_id, entries in found.items():
        entries.sort(key=lambda e: e[0], reverse=True)
        paces.extend((experiment_id, rate, start_up) for _, rate, start_up in entries[:_PACE_SAMPLE])
    return paces


def _whole_runs(s: Session, experiments: set[int]) -> list[tuple[int, float]]:
    """(experiment, seconds) of the experiments' completed trials' last runs."""
    a, t = models.Allocation, models.Trial
    rows = s.execute(
        select(t.experiment_id, a.start_time, a.end_time)
        .join(a, and_(a.trial_id == t.id, a.run_id == t.run_id))
        .where(
            t.experiment_id.in_(experiments),
            t.state == RunState.COMPLETED,
            a.start_time.is_not(None),
            a.end_time.is_not(None),
        )
    )
    return [
        (experiment_id, max(0.0, (end - start).total_seconds()))
        for experiment_id, start, end in rows
        if start is not None and end is not None
    ]


def release_seconds(s: Session, now: datetime) -> dict[str, float]:
    """By pool: how long its preempted allocations took to give up their slots lately (module
    docstring); pools without such preemptions are left out."""
    a = models.Allocation
    rows = s.execute(
        select(a.resource_pool, a.preempt_requested_at, a.end_time)
        .where(
            a.preempt_requested_at >= now - _RELEASE_WINDOW,
            a.end_time.is_not(None),
            a.preempt_reason.startswith(SCHEDULER_PREEMPTION),
        )
        .order_by(a.preempt_requested_at.desc())
        .limit(_RELEASE_SAMPLE * 20)
    )
    took: dict[str, list[float]] = defaultdict(list)
    for pool, asked, ended in rows:
        if asked is not None and ended is not None and len(took[pool]) < _RELEASE_SAMPLE:
            took[pool].append(max(0.0, (ended - asked).total_seconds()))
    return {pool: statistics.median(values) for pool, values in took.items() if values}

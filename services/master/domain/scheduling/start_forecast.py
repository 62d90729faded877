"""When each waiting job is expected to start (the job listing's `predicted_start`): the cluster as
the scheduler takes it, each allocation's expected run time beside it, and the scheduler's own
forecast (PredictStarts: its decisions played forward; services/scheduler/domain/prediction.py).

Expected run times, from what the master records:
- a running trial: what is left at the pace of its current run, `elapsed * (1 - p) / p` for its
  progress p (the searcher's length done, which the trial reports);
- a waiting trial: its experiment's typical run, the mean of its finished trials' last runs and its
  running trials' projected whole runs; unknown for an experiment with neither yet;
- commands, notebooks, shells and TensorBoards: unknown (they end when someone ends them, or idle).
Unknown means it does not end within the forecast: a job only such work holds back gets no
predicted start, and says so.

A forecast plays many decisions, so it is made when someone asks and kept for FORECAST_TTL_S.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from cairn.scheduler.v1 import scheduler_pb2 as pb
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.errors import DomainError
from services.master.domain.kernel.states import PLACED_ALLOCATION, RunState
from services.master.domain.kernel.states import AllocationState as A
from services.master.domain.scheduling.scheduling import build_request
from services.master.store import models

FORECAST_TTL_S = 15.0
HORIZON_S = 7 * 24 * 3600.0
MAX_STEPS = 300
# Below this progress a run's pace says too little to project from.
_MIN_PROGRESS = 0.02


@dataclass(frozen=True)
class StartForecast:
    # Waiting allocation -> when it is expected to start, and the allocation whose end lets it.
    starts: dict[str, tuple[datetime, str]]
    # Why a waiting allocation without a start has none.
    no_start: str
    made_at: datetime


def _projected_run(elapsed_s: float, progress: float) -> float | None:
    if progress < _MIN_PROGRESS or elapsed_s <= 0:
        return None
    return elapsed_s / min(progress, 1.0)


def expected_seconds(s: Session, now: datetime) -> dict[str, float]:
    """Each live trial allocation's expected run (module docstring); others are left out (unknown)."""
    a, t = models.Allocation, models.Trial
    live = list(
        s.execute(
            select(a.id, a.state, a.start_time, t.experiment_id, t.progress)
            .join(t, t.id == a.trial_id)
            .where(a.state.in_([A.PENDING, *PLACED_ALLOCATION]))
        )
    )
    experiments = {row.experiment_id for row in live}
    typical: dict[int, list[float]] = defaultdict(list)
    for row in live:
        if row.state in PLACED_ALLOCATION and row.start_time is not None:
            whole = _projected_run((now - row.start_time).total_seconds(), row.progress or 0.0)
            if whole is not None:
                typical[row.experiment_id].append(whole)
    if experiments:
        finished = s.execute(
            select(t.experiment_id, a.start_time, a.end_time)
            .join(a, a.trial_id == t.id)
            .where(
                t.experiment_id.in_(experiments),
                t.state == RunState.COMPLETED,
                a.start_time.is_not(None),
                a.end_time.is_not(None),
            )
        )
        for experiment_id, start, end in finished:
            if start is not None and end is not None:
                typical[experiment_id].append(max(0.0, (end - start).total_seconds()))
    expected: dict[str, float] = {}
    for row in live:
        if row.state in PLACED_ALLOCATION:
            if row.start_time is None:
                continue
            elapsed = (now - row.start_time).total_seconds()
            whole = _projected_run(elapsed, row.progress or 0.0)
            if whole is not None:
                expected[row.id] = max(0.0, whole - elapsed)
        elif typical.get(row.experiment_id):
            runs = typical[row.experiment_id]
            expected[row.id] = sum(runs) / len(runs)
    return expected


class StartForecasts:
    """The last forecast, made again when older than FORECAST_TTL_S (one at a time)."""

    def __init__(self, ctx: MasterContext) -> None:
        self._ctx = ctx
        self._lock = threading.Lock()
        self._last: StartForecast | None = None
        self._made = 0.0

    def current(self) -> StartForecast:
        with self._lock:
            if self._last is None or time.monotonic() - self._made > FORECAST_TTL_S:
                self._last = self._make()
                self._made = time.monotonic()
            return self._last

    def _make(self) -> StartForecast:
        now = utcnow()
        state, _, _ = build_request(self._ctx)
        with self._ctx.db.read() as s:
            expected = expected_seconds(s, now)
        request = pb.PredictStartsRequest(
            state=state, expected_seconds=expected, horizon_seconds=HORIZON_S, max_steps=MAX_STEPS
        )
        try:
            answer = self._ctx.scheduler.predict_starts(request)
        except DomainError as exc:
            return StartForecast({}, f"no forecast: the scheduler could not be asked ({exc})", now)
        starts: dict[str, tuple[datetime, str]] = {
            p.allocation_id: (now + timedelta(seconds=p.start_in_seconds), p.after_allocation_id)
            for p in answer.predictions
            if p.start_in_seconds >= 0
        }
        why = (
            "beyond the forecast's reach (it plays the next decisions only)"
            if answer.truncated
            else "no start within 7 days: the work ahead of it has no known end"
        )
        return StartForecast(starts, why, now)

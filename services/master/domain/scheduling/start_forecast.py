"""When each waiting job is expected to start (the job listing's `predicted_start`): the cluster as
the scheduler takes it, each allocation's expected run time beside it (expected_runs.py), and the
scheduler's own forecast (PredictStarts: its decisions played forward from now, with fair share's
minimum run before reclaim and recent usage moving as they will;
services/scheduler/domain/prediction.py).

A forecast is made when someone asks and the last one is older than its refresh interval: at
least MIN_REFRESH_S, and COST_FACTOR times what the last one took, so that forecasting takes at
most about a quarter of the scheduler's time however often the queue is read (and none while
nobody reads it); a forecast costs a scheduler decision per moment it plays (a few milliseconds for
a few hundred requests, much more on a large fair-share pool). A forecast shown is at most that old
and says when it was made (`made_at`, the listing's `forecast_time`); the starts it forecast that
have happened since are passed over (StartForecast.next_start). While one is being made, other
readers get the last one.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from google.protobuf.timestamp_pb2 import Timestamp

from cairn.scheduler.v1 import scheduler_pb2 as pb
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.errors import DomainError
from services.master.domain.scheduling.expected_runs import expected_runs, release_seconds
from services.master.domain.scheduling.scheduling import build_request

# A forecast is made again when the last is older than this, and COST_FACTOR times its cost.
MIN_REFRESH_S = 1.0
COST_FACTOR = 3.0
HORIZON_S = 7 * 24 * 3600.0
MAX_STEPS = 300
# A job's first start is sought up to HORIZON_S; its later ones (which the listing shows as its
# earlier ones happen, until the next forecast) this far, or until the next forecast is due if
# later (not much beyond: a longer play costs more, which puts the next forecast further off).
JOB_HORIZON_S = 30.0


@dataclass(frozen=True)
class JobForecast:
    """A job's allocations that waited when the forecast was made, and their forecast starts,
    earliest first: when, and the job whose allocation's end (or preemption) lets it ("": it
    starts with what is free now)."""

    waiting: frozenset[str]
    starts: tuple[tuple[datetime, str], ...]


@dataclass(frozen=True)
class StartForecast:
    # By the scheduler's job key (its requests' job_id, else the allocation's id).
    jobs: dict[str, JobForecast]
    # Allocation (waiting when the forecast was made) -> its job key.
    job_of: dict[str, str]
    # Why a waiting job without a start has none.
    no_start: str
    made_at: datetime

    def next_start(
        self, allocation_ids: Iterable[str], pending_ids: Iterable[str], now: datetime
    ) -> tuple[datetime, str] | str:
        """A job's next start, from its live allocations and those of them still waiting, or why
        there is none. The forecast is a moment older than now: of the starts it forecast for
        the job, as many as have happened since (its allocations that waited then and wait no
        longer) are passed over, whichever allocations they were, and so are those it put
        before now that have not happened (the job runs behind the forecast): the next is the
        first left at or after now. If none is left after now, the job's next start is due now."""
        key = next((self.job_of[a] for a in allocation_ids if a in self.job_of), None)
        if key is None:
            return self.no_start
        job = self.jobs[key]
        left = job.starts[len(job.waiting - set(pending_ids)) :]
        if not left:
            if job.starts:
                return "the starts forecast for it have come; the next forecast tells the next"
            return self.no_start
        return next((start for start in left if start[0] >= now), (now, left[-1][1]))


class StartForecasts:
    """The last forecast, made again when older than its refresh interval (module docstring)."""

    def __init__(self, ctx: MasterContext) -> None:
        self._ctx = ctx
        self._making = threading.Lock()
        self._last: StartForecast | None = None
        self._made = 0.0
        self._cost = 0.0

    def refresh_interval(self) -> float:
        return max(MIN_REFRESH_S, COST_FACTOR * self._cost)

    def current(self) -> StartForecast:
        last = self._last
        if last is not None and time.monotonic() - self._made < self.refresh_interval():
            return last
        # One maker at a time; the others take the last forecast meanwhile (or wait for the first).
        if not self._making.acquire(blocking=last is None):
            assert last is not None
            return last
        try:
            if self._last is not None and time.monotonic() - self._made < self.refresh_interval():
                return self._last
            began = time.monotonic()
            self._last = self._make()
            self._made = time.monotonic()
            self._cost = self._made - began
            return self._last
        finally:
            self._making.release()

    def _make(self) -> StartForecast:
        state, _, _ = build_request(self._ctx)
        now = utcnow()
        with self._ctx.db.read() as s:
            expected = expected_runs(s, now)
            release = release_seconds(s, now)
        stamp = Timestamp()
        stamp.FromDatetime(now)
        request = pb.PredictStartsRequest(
            state=state,
            expected_seconds=expected.seconds,
            restart_seconds=expected.restart_seconds,
            horizon_seconds=HORIZON_S,
            max_steps=MAX_STEPS,
            job_horizon_seconds=max(JOB_HORIZON_S, self.refresh_interval() + self._cost),
            now=stamp,
            release_seconds=release,
            usage_half_life_seconds={
                p.name: p.usage_half_life_s
                for p in self._ctx.settings.pools
                if p.scheduler_type == "fair_share"
            },
        )
        try:
            answer = self._ctx.scheduler.predict_starts(request)
        except DomainError as exc:
            return StartForecast({}, {}, f"no forecast: the scheduler could not be asked ({exc})", now)
        job_of = {r.allocation_id: r.job_id or r.allocation_id for r in state.requests}
        waiting: dict[str, set[str]] = defaultdict(set)
        starts: dict[str, list[tuple[datetime, str]]] = defaultdict(list)
        for p in answer.predictions:
            key = job_of.get(p.allocation_id, p.allocation_id)
            waiting[key].add(p.allocation_id)
            if p.start_in_seconds >= 0:
                after = job_of.get(p.after_allocation_id, p.after_allocation_id)
                starts[key].append((now + timedelta(seconds=p.start_in_seconds), after))
        jobs = {key: JobForecast(frozenset(ids), tuple(sorted(starts[key]))) for key, ids in waiting.items()}
        waiting_job = {a: key for key, ids in waiting.items() for a in ids}
        why = (
            "beyond the forecast's reach (it plays the next decisions only)"
            if answer.truncated
            else "no start within 7 days: the work ahead of it has no known end"
        )
        return StartForecast(jobs, waiting_job, why, now)

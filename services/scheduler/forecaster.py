"""Start forecasts (PredictStarts) in a worker process of their own, at a lower CPU priority.

A forecast plays hundreds of decisions (domain/prediction.py): seconds of CPU on a busy fair-share
pool. In the scheduler's own process it would hold the interpreter against the passes the master
waits for (Schedule, ScheduleChanges), so that a queue being read would slow the queue itself. In a
process of its own, niced, it takes what CPU the passes, the master and the agents leave: on a busy
machine a forecast takes longer (and is older when read), but scheduling does not. The worker is
started at the first forecast (spawned: the scheduler's gRPC threads are not forked), serves them
one at a time, and is started again if it dies.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from cairn.scheduler.v1 import scheduler_pb2 as pb
from services.scheduler.convert import clock_from_proto, forecast_to_proto, state_from_proto
from services.scheduler.domain.errors import InvalidScheduleInput
from services.scheduler.domain.prediction import predict_starts

# How much lower the worker's CPU priority is (os.nice's increment; 19 is the lowest priority).
FORECAST_NICENESS = 10


def forecast(request: pb.PredictStartsRequest) -> pb.PredictStartsResponse:
    """The forecast itself, in whatever process calls it. Raises InvalidScheduleInput."""
    answer = predict_starts(
        state_from_proto(request.state),
        dict(request.expected_seconds),
        request.horizon_seconds,
        request.max_steps,
        clock_from_proto(request),
        dict(request.restart_seconds),
        request.job_horizon_seconds or None,
    )
    return forecast_to_proto(request, answer)


def _lower_priority(niceness: int) -> None:
    os.nice(niceness)


def _forecast_in_worker(raw: bytes) -> tuple[bytes, tuple[str, str] | None]:
    """In the worker: the answer, serialized, or the refusal's field and problem (an exception
    with arguments of its own would not survive the trip back)."""
    try:
        return forecast(pb.PredictStartsRequest.FromString(raw)).SerializeToString(), None
    except InvalidScheduleInput as exc:
        return b"", (exc.field, exc.problem)


class Forecaster:
    """The worker process and the way to it; safe to call from several threads."""

    def __init__(self, niceness: int = FORECAST_NICENESS) -> None:
        self._niceness = niceness
        self._lock = threading.Lock()
        self._pool: ProcessPoolExecutor | None = None

    def _worker(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    max_workers=1,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=_lower_priority,
                    initargs=(self._niceness,),
                )
            return self._pool

    def _forget(self, pool: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is pool:
                self._pool = None
        pool.shutdown(wait=False, cancel_futures=True)

    def predict(self, request: pb.PredictStartsRequest) -> pb.PredictStartsResponse:
        """The forecast, from the worker (started again once if it had died). Raises
        InvalidScheduleInput as the forecast does."""
        raw = request.SerializeToString()
        for attempt in (1, 2):
            pool = self._worker()
            try:
                answer, refused = pool.submit(_forecast_in_worker, raw).result()
                break
            except BrokenProcessPool:
                self._forget(pool)
                if attempt == 2:
                    raise
        if refused is not None:
            raise InvalidScheduleInput(*refused)
        return pb.PredictStartsResponse.FromString(answer)

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

"""Metric reports on their way to the master: queued by the training loop, sent in batches by one
background thread.

Each report gets a sequence number when it is queued (1, 2, 3, ... per allocation), so a batch
resent after a failure whose outcome was unknown is stored once by the master. A failure that
outlasts the retry budget, or a refusal, stops the shipper; the error is raised to the training
code on its next report and when the context closes, never dropped.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grpc
from google.protobuf import timestamp_pb2

from cairn.api.v1 import trial_pb2
from cairn.core.errors import MasterCallError, MetricsReportError
from cairn.core.json_values import JsonValue, to_struct
from cairn.core.master_session import MasterSession
from cairn.core.retry import call_with_retry, describe

log = logging.getLogger(__name__)

# Sequence numbers must not repeat within an allocation: a second context in the same process
# (the training code may open one after another) continues where the first stopped.
_sequence_lock = threading.Lock()
_last_sequence: dict[str, int] = {}

# Queued to wake the sender when it should stop.
_WAKE = object()


def _next_sequence(allocation_id: str) -> int:
    with _sequence_lock:
        seq = _last_sequence.get(allocation_id, 0) + 1
        _last_sequence[allocation_id] = seq
        return seq


def _continue_after(allocation_id: str, stored: int) -> None:
    """Never reuse a number the master already holds (another process of this allocation)."""
    with _sequence_lock:
        _last_sequence[allocation_id] = max(_last_sequence.get(allocation_id, 0), stored)


class MetricsShipper:
    def __init__(
        self, session: MasterSession, *, trial_id: int, trial_run_id: int, allocation_id: str
    ) -> None:
        self._session = session
        self._settings = session.settings
        self._trial_id = trial_id
        self._trial_run_id = trial_run_id
        self._allocation_id = allocation_id
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=self._settings.metrics_queue_size)
        # Serializes numbering and queueing, so reports enter the queue in sequence order.
        self._submit_lock = threading.Lock()
        self._state = threading.Condition()
        self._last_queued = 0
        self._last_stored = 0
        self._failure: MetricsReportError | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._learn_stored_sequence()
        self._thread = threading.Thread(
            target=self._run, name=f"cairn-metrics-{self._allocation_id}", daemon=True
        )
        self._thread.start()

    def _learn_stored_sequence(self) -> None:
        """An empty batch answers with the highest seq stored for this run, so a second process of
        the same allocation (an entrypoint running two scripts) continues the numbering."""
        request = trial_pb2.ReportTrialMetricsBatchRequest(
            trial_id=self._trial_id, trial_run_id=self._trial_run_id
        )
        try:
            response = self._call(request)
        except MasterCallError as exc:
            raise MetricsReportError(f"metrics of trial {self._trial_id} cannot be reported: {exc}") from exc
        _continue_after(self._allocation_id, response.max_stored_seq)

    def _call(
        self,
        request: trial_pb2.ReportTrialMetricsBatchRequest,
        on_failed_attempt: Callable[[grpc.RpcError], None] | None = None,
    ) -> trial_pb2.ReportTrialMetricsBatchResponse:
        stub, timeout, metadata = self._session.stub, self._settings.call_timeout_s, self._session.metadata
        return call_with_retry(
            lambda: stub.ReportTrialMetricsBatch(request, timeout=timeout, metadata=metadata),
            self._settings.retry,
            what="ReportTrialMetricsBatch",
            master=self._session.address,
            interrupt=self._session.closing,
            on_failed_attempt=on_failed_attempt,
        )

    def raise_if_failed(self) -> None:
        with self._state:
            if self._failure is not None:
                raise self._failure

    def submit(
        self,
        group: str,
        steps_completed: int,
        metrics: Mapping[str, JsonValue],
        batch_metrics: Sequence[Mapping[str, JsonValue]] | None,
    ) -> None:
        """Queue a report (already checked and plain); waits while the queue is full."""
        if self._thread is None or self._stopping.is_set():
            raise RuntimeError(
                "the Core API is not running: report metrics inside `with cairn.core.init() as core:`"
            )
        report = trial_pb2.MetricReport(
            group=group,
            steps_completed=steps_completed,
            report_time=_now(),
            metrics=to_struct(metrics),
            batch_metrics=[to_struct(batch) for batch in batch_metrics or ()],
        )
        with self._submit_lock:
            self.raise_if_failed()
            report.seq = _next_sequence(self._allocation_id)
            while True:
                try:
                    self._queue.put(report, timeout=0.2)
                    break
                except queue.Full:
                    # The sender is retrying through an outage; its failure must not leave us here.
                    self.raise_if_failed()
            with self._state:
                self._last_queued = report.seq

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued report is stored; False when `timeout` passed first.
        Raises the shipper's failure."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._state:
            pending = self._last_stored < self._last_queued
        if pending:
            try:
                self._queue.put_nowait(_WAKE)  # cut the sender's linger short
            except queue.Full:
                pass  # a full queue is sent without lingering anyway
        with self._state:
            while self._failure is None and self._last_stored < self._last_queued:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._state.wait(remaining)
            if self._failure is not None:
                raise self._failure
            return True

    def close(self, flush_timeout: float | None) -> None:
        """Flush (for at most `flush_timeout`), then stop the sender. Raises the shipper's failure;
        logs what could not be sent in time."""
        if self._thread is None:
            return
        try:
            if not self.flush(flush_timeout):
                with self._state:
                    unsent = self._last_queued - self._last_stored
                log.error(
                    "metrics not stored before exit: trial_id=%s allocation_id=%s unsent_reports=%d",
                    self._trial_id,
                    self._allocation_id,
                    unsent,
                )
        finally:
            self._stopping.set()
            try:
                self._queue.put_nowait(_WAKE)
            except queue.Full:
                pass
            self._thread.join(timeout=5.0)

    def _run(self) -> None:
        while True:
            batch = self._collect()
            if batch:
                try:
                    self._send(batch)
                except MetricsReportError as failure:
                    with self._state:
                        self._failure = failure
                        self._state.notify_all()
                    log.error("%s", failure)
                    return
                with self._state:
                    self._last_stored = batch[-1].seq
                    self._state.notify_all()
            elif self._stopping.is_set():
                return

    def _collect(self) -> list[trial_pb2.MetricReport]:
        """The next batch: waits for a first report, then lingers briefly for more."""
        batch: list[trial_pb2.MetricReport] = []
        while not batch:
            if self._stopping.is_set() and self._queue.empty():
                return batch
            try:
                item = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            if item is not _WAKE:
                batch.append(item)
        deadline = time.monotonic() + self._settings.metrics_linger_s
        while len(batch) < self._settings.metrics_batch_size:
            remaining = deadline - time.monotonic()
            try:
                item = self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if item is _WAKE:
                break  # someone waits for what is queued (a flush, a checkpoint, the exit): send now
            batch.append(item)
        return batch

    def _send(self, batch: list[trial_pb2.MetricReport]) -> None:
        request = trial_pb2.ReportTrialMetricsBatchRequest(
            trial_id=self._trial_id, trial_run_id=self._trial_run_id, reports=batch
        )
        failed_attempts: list[grpc.RpcError] = []

        def note_failure(exc: grpc.RpcError) -> None:
            failed_attempts.append(exc)
            log.warning(
                "sending metrics failed, will retry: trial_id=%s seqs=%d..%d error=%s",
                self._trial_id,
                batch[0].seq,
                batch[-1].seq,
                describe(exc),
            )

        try:
            response = self._call(request, on_failed_attempt=note_failure)
        except MasterCallError as exc:
            raise MetricsReportError(
                f"metrics of trial {self._trial_id} could not be stored ({exc}); reports from seq "
                f"{batch[0].seq} on were not stored"
            ) from exc
        if response.duplicates and not failed_attempts:
            # Nothing of this batch was sent before, yet the master had these numbers: another
            # process of the allocation reported under them, and these reports were dropped.
            raise MetricsReportError(
                f"metrics of trial {self._trial_id}: {response.duplicates} report(s) with seqs in "
                f"{batch[0].seq}..{batch[-1].seq} were already stored by another process of allocation "
                f"{self._allocation_id}; only one process per allocation may report metrics"
            )


def _now() -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.GetCurrentTime()
    return stamp

"""Metric reports on their way to the master: queued by the training loop, sent in batches by one
background thread.

A report costs the training loop an append to a list under a lock: the sender is not woken for
each one (that wake-up was most of reporting's cost in a tight loop). It sleeps until the first
report after an empty spell, then lingers (metrics_linger_s) and takes what came meanwhile; it is
woken early only when a batch is full or someone waits for what is queued (a flush, a checkpoint,
the exit). Reports become protobuf messages on the sender's thread.

Each report gets a sequence number when it is queued (1, 2, 3, ... per allocation), so a batch
resent after a failure whose outcome was unknown is stored once by the master. A failure that
outlasts the retry budget, or a refusal, stops the shipper; the error is raised to the training
code on its next report and when the context closes, never dropped.

The trial's progress travels the same way: the latest value rides on the batch that takes the
last report queued before it (or on one with no report if none is queued), so the master stores
it with or after those reports; reporting it each epoch costs no call of its own, and a flush waits
for it as for the reports. One batch carrying progress is on its way at a time: two, stored in
either order once their predecessor is, could leave an older value over a newer one.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import grpc
from google.protobuf import timestamp_pb2

try:
    import orjson
except ImportError:  # pragma: no cover - a dependency of the client; the stdlib encoder does too
    orjson = None  # type: ignore[assignment]

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


def _next_sequence(allocation_id: str) -> int:
    with _sequence_lock:
        seq = _last_sequence.get(allocation_id, 0) + 1
        _last_sequence[allocation_id] = seq
        return seq


def _continue_after(allocation_id: str, stored: int) -> None:
    """Never reuse a number the master already holds (another process of this allocation)."""
    with _sequence_lock:
        _last_sequence[allocation_id] = max(_last_sequence.get(allocation_id, 0), stored)


class _Queued(NamedTuple):
    # A tuple, not a frozen dataclass: one is made per report, and a training loop may report
    # every step (a frozen dataclass's __init__ costs a microsecond more).
    seq: int
    group: str
    steps_completed: int
    report_time: float  # time.time() when reported
    metrics: Mapping[str, JsonValue]
    batch_metrics: Sequence[Mapping[str, JsonValue]] | None

    def message(self) -> trial_pb2.MetricReport:
        stamp = timestamp_pb2.Timestamp()
        stamp.FromNanoseconds(int(self.report_time * 1e9))
        return trial_pb2.MetricReport(
            seq=self.seq,
            group=self.group,
            steps_completed=self.steps_completed,
            report_time=stamp,
            metrics=to_struct(self.metrics),
            batch_metrics=[to_struct(batch) for batch in self.batch_metrics or ()],
        )


class _Progress(NamedTuple):
    value: float
    number: int  # the shipper's _progress_reported when it was reported


class _Outgoing(NamedTuple):
    batch: list[_Queued]
    progress: _Progress | None
    after_seq: int

    def describe(self) -> str:
        if not self.batch:
            return "progress"
        return f"seqs={self.batch[0].seq}..{self.batch[-1].seq}"


class MetricsShipper:
    def __init__(
        self, session: MasterSession, *, trial_id: int, trial_run_id: int, allocation_id: str
    ) -> None:
        self._session = session
        self._settings = session.settings
        self._trial_id = trial_id
        self._trial_run_id = trial_run_id
        self._allocation_id = allocation_id
        # Reports not yet taken by the sender, in sequence order; `_room` waits for space in it.
        self._queue: list[_Queued] = []
        self._queue_lock = threading.Lock()
        self._room = threading.Condition(self._queue_lock)
        # Set to make the sender send now, rather than at the end of its linger.
        self._send_now = threading.Event()
        # Set when the first report after an empty spell is queued (the sender sleeps until then).
        self._reported = threading.Event()
        self._state = threading.Condition()
        self._last_queued = 0
        self._last_stored = 0
        # The latest progress not yet taken by the sender (under _queue_lock), and how many times
        # progress was reported, and stored (under _state): a flush waits for the last one too.
        self._progress: float | None = None
        self._progress_reported = 0
        self._progress_stored = 0
        # A batch carrying progress is on its way (under _queue_lock): the next value waits for it.
        self._progress_in_flight = False
        # False once the master showed it does not read progress in batches (ReportTrialProgress).
        self._master_reads_progress = True
        self._failure: MetricsReportError | None = None
        self._stopping = threading.Event()
        # Set once the sender learned where this allocation's numbering stands (or failed to):
        # the first report waits for it, the start of the trial does not.
        self._numbered = threading.Event()
        self._thread: threading.Thread | None = None
        # Batches go as one JSON document (ReportTrialMetricsBatchRequest.reports_json) unless the
        # master turns out not to read that form.
        self._json_wire = True
        # Batches on their way: one, or two once the master keeps them in order (_run).
        self._slots = threading.Semaphore(1)
        # Sent by two daemon threads (a process exiting without closing the Core API must not wait
        # on a retrying call), each taking one in turn; None ends one.
        self._outgoing: queue.SimpleQueue[_Outgoing | None] = queue.SimpleQueue()
        self._last_sent = 0

    def start(self) -> None:
        """Start the sender. Its first call (learning the stored numbering) is made on its own
        thread, so that the training code starts without waiting a round trip for it."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self._run, name=f"cairn-metrics-{self._allocation_id}", daemon=True
        )
        self._thread.start()

    def _learn_stored_sequence(self) -> trial_pb2.ReportTrialMetricsBatchResponse:
        """An empty batch answers with the highest seq stored for this run, so a second process of
        the same allocation (an entrypoint running two scripts) continues the numbering; and says
        whether the master keeps batches sent before the last was answered in order."""
        request = trial_pb2.ReportTrialMetricsBatchRequest(
            trial_id=self._trial_id, trial_run_id=self._trial_run_id
        )
        try:
            response = self._call(request)
        except MasterCallError as exc:
            raise MetricsReportError(f"metrics of trial {self._trial_id} cannot be reported: {exc}") from exc
        _continue_after(self._allocation_id, response.max_stored_seq)
        return response

    def _fail(self, failure: MetricsReportError) -> None:
        with self._state:
            self._failure = failure
            self._state.notify_all()
        with self._queue_lock:
            self._room.notify_all()
        self._numbered.set()
        log.error("%s", failure)

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
        failure = self._failure  # set once, never cleared: a plain read is enough
        if failure is not None:
            raise failure

    def _check_running(self, what: str) -> None:
        if self._thread is None or self._stopping.is_set():
            raise RuntimeError(
                f"the Core API is not running: report {what} inside `with cairn.core.init() as core:`"
            )

    def report_progress(self, progress: float) -> None:
        """Send the trial's progress (checked) with the next batch; only the latest is sent."""
        self._check_running("progress")
        with self._queue_lock:
            self.raise_if_failed()
            self._progress = progress
            with self._state:
                self._progress_reported += 1
            idle = not self._queue
        if idle:
            self._reported.set()

    def submit(
        self,
        group: str,
        steps_completed: int,
        metrics: Mapping[str, JsonValue],
        batch_metrics: Sequence[Mapping[str, JsonValue]] | None,
    ) -> None:
        """Queue a report (already checked and plain); waits while the queue is full."""
        self._check_running("metrics")
        reported_at = time.time()
        if not self._numbered.is_set():
            # Only the first report of a process can get here before the sender's first answer.
            self._numbered.wait()
        with self._queue_lock:
            self.raise_if_failed()
            while len(self._queue) >= self._settings.metrics_queue_size:
                # The sender is behind (or retrying through an outage): wait for room, but never
                # past its failure.
                self._send_now.set()
                self._room.wait(0.2)
                self.raise_if_failed()
            seq = _next_sequence(self._allocation_id)
            self._queue.append(_Queued(seq, group, steps_completed, reported_at, metrics, batch_metrics))
            queued = len(self._queue)
            self._last_queued = seq
        if queued == 1:
            self._reported.set()
        elif queued >= self._settings.metrics_batch_size and not self._send_now.is_set():
            self._send_now.set()  # once: setting a set Event still takes its lock and notifies

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued report is stored; False when `timeout` passed first.
        Raises the shipper's failure."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._state:
            pending = self._pending()
        if pending:
            self._send_now.set()  # cut the sender's linger short
            self._reported.set()
        with self._state:
            while self._failure is None and self._pending():
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._state.wait(remaining)
            if self._failure is not None:
                raise self._failure
            return True

    def _pending(self) -> bool:
        """Reports or progress not stored yet (under _state)."""
        return self._last_stored < self._last_queued or self._progress_stored < self._progress_reported

    def close(self, flush_timeout: float | None) -> None:
        """Flush (for at most `flush_timeout`), then stop the sender. Raises the shipper's failure;
        logs what could not be sent in time."""
        if self._thread is None:
            return
        try:
            if not self.flush(flush_timeout):
                with self._state:
                    unsent = self._last_queued - self._last_stored
                    progress_unsent = self._progress_stored < self._progress_reported
                log.error(
                    "metrics not stored before exit: trial_id=%s allocation_id=%s unsent_reports=%d "
                    "progress_unsent=%s",
                    self._trial_id,
                    self._allocation_id,
                    unsent,
                    progress_unsent,
                )
        finally:
            self._stopping.set()
            self._send_now.set()
            self._reported.set()
            self._thread.join(timeout=5.0)

    def _run(self) -> None:
        # A trial's rows must be stored in the order they were reported (the summary's last
        # values, the order curves are read in). The next batch goes while the last is being
        # stored (two at most on the way), naming the last one's highest number (after_seq), once
        # the master said it stores such a batch only after that one; until then one at a time.
        try:
            response = self._learn_stored_sequence()
        except MetricsReportError as failure:
            self._fail(failure)
            return
        self._numbered.set()
        if response.ordered_batches:
            self._slots.release()  # a second batch on the way
        senders = [
            threading.Thread(
                target=self._send_each, name=f"{threading.current_thread().name}-send", daemon=True
            )
            for _ in range(2)
        ]
        for sender in senders:
            sender.start()
        try:
            while self._failure is None:
                # A slot first, then the batch: what waits for a slot stays in the queue, whose
                # bound holds the training code back.
                self._slots.acquire()
                batch, progress = self._collect() if self._failure is None else ([], None)
                if batch or progress is not None:
                    after_seq = self._last_sent
                    if batch:
                        self._last_sent = batch[-1].seq
                    self._outgoing.put(
                        _Outgoing(batch, progress, after_seq if response.ordered_batches else 0)
                    )
                    continue
                self._slots.release()
                if self._stopping.is_set() or self._failure is not None:
                    return
        finally:
            for _ in senders:
                self._outgoing.put(None)
            for sender in senders:
                sender.join()

    def _send_each(self) -> None:
        while (item := self._outgoing.get()) is not None:
            self._send_one(item)

    def _send_one(self, item: _Outgoing) -> None:
        try:
            self._send(item)
        except MetricsReportError as failure:
            self._fail(failure)
            return
        finally:
            self._slots.release()
            if item.progress is not None:
                with self._queue_lock:
                    self._progress_in_flight = False
                    waiting = self._progress is not None
                if waiting:
                    self._reported.set()  # the value reported meanwhile may go now
        with self._state:
            # A batch stored means every one before it is (the master kept their order).
            if item.batch:
                self._last_stored = max(self._last_stored, item.batch[-1].seq)
            if item.progress is not None:
                self._progress_stored = max(self._progress_stored, item.progress.number)
            self._state.notify_all()

    def _full_batch_queued(self) -> bool:
        with self._queue_lock:
            return len(self._queue) >= self._settings.metrics_batch_size

    def _take(self) -> tuple[list[_Queued], _Progress | None]:
        with self._queue_lock:
            size = self._settings.metrics_batch_size
            batch, self._queue = self._queue[:size], self._queue[size:]
            progress = None
            # Only on the batch that empties the queue (the reports queued before it go first),
            # and not while another batch carrying progress is on its way.
            if self._progress is not None and not self._queue and not self._progress_in_flight:
                with self._state:
                    progress = _Progress(self._progress, self._progress_reported)
                self._progress = None
                self._progress_in_flight = True
            self._room.notify_all()
        return batch, progress

    def _collect(self) -> tuple[list[_Queued], _Progress | None]:
        """The next batch and the latest progress: waits for a first report (or progress), then
        lingers briefly for more (unless a full batch, a flush or the exit says to send now)."""
        while True:
            with self._queue_lock:
                waiting = bool(self._queue) or (self._progress is not None and not self._progress_in_flight)
                if not waiting:
                    self._reported.clear()
            if waiting:
                break
            if self._stopping.is_set():
                return [], None
            self._reported.wait(0.5)
        self._send_now.wait(self._settings.metrics_linger_s)
        self._send_now.clear()
        batch, progress = self._take()
        if self._full_batch_queued():
            self._send_now.set()  # a full batch waits: no linger for it
        return batch, progress

    def _request(
        self, batch: list[_Queued], after_seq: int = 0, progress: _Progress | None = None
    ) -> trial_pb2.ReportTrialMetricsBatchRequest:
        request = trial_pb2.ReportTrialMetricsBatchRequest(
            trial_id=self._trial_id, trial_run_id=self._trial_run_id, after_seq=after_seq
        )
        if progress is not None:
            request.progress = progress.value
        if self._json_wire:
            rows = [
                [q.seq, q.group, q.steps_completed, q.report_time, q.metrics, q.batch_metrics] for q in batch
            ]
            request.reports_json = _encode_json(rows)
        else:
            request.reports.extend(queued.message() for queued in batch)
        return request

    def _send(self, item: _Outgoing) -> None:
        batch, progress = item.batch, item.progress
        failed_attempts: list[grpc.RpcError] = []

        def note_failure(exc: grpc.RpcError) -> None:
            failed_attempts.append(exc)
            log.warning(
                "sending metrics failed, will retry: trial_id=%s %s error=%s",
                self._trial_id,
                item.describe(),
                describe(exc),
            )

        in_batch = progress if self._master_reads_progress else None
        try:
            response = self._call(
                self._request(batch, item.after_seq, in_batch), on_failed_attempt=note_failure
            )
            if batch and self._json_wire and response.stored + response.duplicates == 0:
                # A master older than the JSON form read no report from it: send as messages.
                log.info("the master reads no JSON metric batches; sending them as messages")
                self._json_wire = False
                response = self._call(self._request(batch, 0, in_batch), on_failed_attempt=note_failure)
        except MasterCallError as exc:
            unsent = f"reports from seq {batch[0].seq} on were not stored" if batch else "progress not stored"
            raise MetricsReportError(
                f"metrics of trial {self._trial_id} could not be stored ({exc}); {unsent}"
            ) from exc
        if in_batch is not None and not response.progress_stored:
            log.info("the master reads no progress in metric batches; sending it in calls of its own")
            self._master_reads_progress = False
        if progress is not None and not self._master_reads_progress:
            self._send_progress_call(progress)
        if response.duplicates and not failed_attempts:
            # Nothing of this batch was sent before, yet the master had these numbers: another
            # process of the allocation reported under them, and these reports were dropped.
            raise MetricsReportError(
                f"metrics of trial {self._trial_id}: {response.duplicates} report(s) with seqs in "
                f"{batch[0].seq}..{batch[-1].seq} were already stored by another process of allocation "
                f"{self._allocation_id}; only one process per allocation may report metrics"
            )

    def _send_progress_call(self, progress: _Progress) -> None:
        """Progress for a master older than progress in batches: ReportTrialProgress."""
        try:
            self._session.call(
                self._session.stub.ReportTrialProgress,
                trial_pb2.ReportTrialProgressRequest(
                    trial_id=self._trial_id, progress=progress.value, is_raw=True
                ),
                what="ReportTrialProgress",
            )
        except MasterCallError as exc:
            raise MetricsReportError(
                f"progress of trial {self._trial_id} could not be stored ({exc})"
            ) from exc


def _encode_json(rows: list[list[Any]]) -> bytes:
    """The batch as one JSON document (values are plain JSON already: no NaN or infinities)."""
    if orjson is not None:
        return bytes(orjson.dumps(rows))
    return json.dumps(rows, separators=(",", ":"), allow_nan=False).encode()

"""A test double of the master's trial-facing API (service `Cairn`), served over a real socket.

It keeps just enough state to answer the Core API as the master does (metrics stored once per
sequence number, checkpoints, searcher operations, allocation signals), records every call, and
can fail chosen calls, before or after doing their work, to exercise the client's retries.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf.message import Message

from cairn.api.v1 import api_pb2_grpc, checkpoint_pb2, task_pb2, trial_pb2

TOKEN = "allocation-secret"
ALLOCATION_KIND = task_pb2.AllocationSignal
POLL_S = 0.02


@dataclass
class Failure:
    code: grpc.StatusCode
    # True: the call does its work first, then fails (the reply is lost, the effect is not).
    after_work: bool = False


@dataclass
class SignalState:
    preempt: bool = False
    reason: str = ""
    searcher_target: int = 0


@dataclass
class Calls:
    """Every request received, by method name, in order."""

    by_method: dict[str, list[Any]] = field(default_factory=dict)

    def of(self, method: str) -> list[Any]:
        return list(self.by_method.get(method, []))


class MasterDouble(api_pb2_grpc.CairnServicer):
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._closed = False
        self.calls = Calls()
        self._failures: dict[str, list[Failure]] = {}
        self.unauthenticated_calls = 0
        # Metrics.
        self.stored_reports: list[trial_pb2.MetricReport] = []
        # False: a master older than ReportTrialMetricsBatchRequest.reports_json (it sees no report).
        self.reads_json_batches = True
        self._stored_seqs: set[int] = set()
        # True: a master that keeps batches sent before the last was answered in order (after_seq).
        self.orders_batches = False
        # Progress each batch carried, in the order stored; False: a master older than
        # ReportTrialMetricsBatchRequest.progress (it neither reads nor stores it).
        self.batch_progress: list[float] = []
        # The progress stored when each operation was said to be completed.
        self.progress_at_completions: list[float | None] = []
        self.reads_batch_progress = True
        self.metrics_gate = threading.Event()
        self.metrics_gate.set()
        # Holds the shipper's opening question (which seqs are stored?) while clear.
        self.sequence_gate = threading.Event()
        self.sequence_gate.set()
        # Checkpoints.
        self.checkpoints: dict[str, checkpoint_pb2.Checkpoint] = {}
        # Searcher.
        self.configured_length = 0
        self.completed_length = 0
        self.searcher_stopped = False
        # Targets the searcher sets when a validation completes (promotion while running).
        self.promotions: list[int] = []
        self.best_metric: float | None = None
        self.early_exit_reported = False
        # Signals.
        self.signals = SignalState()
        self.watch_unimplemented = False
        # Streams to break (UNAVAILABLE) right after their first message.
        self.streams_to_break = 0
        # Streams to end with RESOURCE_EXHAUSTED after their first message (no room to wait).
        self.streams_without_room = 0
        self.streams_opened = 0

    # ---- control from the tests ----

    def fail(self, method: str, code: grpc.StatusCode, *, times: int = 1, after_work: bool = False) -> None:
        with self._cond:
            self._failures.setdefault(method, []).extend(Failure(code, after_work) for _ in range(times))

    def preempt(self, reason: str = "paused") -> None:
        with self._cond:
            self.signals.preempt = True
            self.signals.reason = reason
            self._cond.notify_all()

    def set_searcher_target(self, target: int) -> None:
        with self._cond:
            self.signals.searcher_target = target
            self._cond.notify_all()

    sequence_queries = 0

    def store_seqs_beforehand(self, seqs: list[int]) -> None:
        """As if another process of the allocation had reported under these numbers."""
        with self._cond:
            self._stored_seqs.update(seqs)

    refuse_sequence_queries = False

    def stop_answering_sequence_queries(self) -> None:
        """Refuse the shipper's opening question from now on (FAILED_PRECONDITION)."""
        with self._cond:
            self.refuse_sequence_queries = True

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self.metrics_gate.set()
        self.sequence_gate.set()

    # ---- plumbing ----

    def _enter(self, method: str, request: Message, context: grpc.ServicerContext) -> Failure | None:
        """Check the token, record the call, and return a failure planned for after the work."""
        metadata = dict(context.invocation_metadata() or ())
        if metadata.get("x-allocation-token") != f"Bearer {TOKEN}":
            with self._cond:
                self.unauthenticated_calls += 1
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong allocation token")
        copy = type(request)()
        copy.CopyFrom(request)
        with self._cond:
            self.calls.by_method.setdefault(method, []).append(copy)
            planned = self._failures.get(method)
            failure = planned.pop(0) if planned else None
        if failure is not None and not failure.after_work:
            context.abort(failure.code, f"{method}: failing as the test asked")
        return failure

    @staticmethod
    def _leave(method: str, failure: Failure | None, context: grpc.ServicerContext) -> None:
        if failure is not None:
            context.abort(failure.code, f"{method}: failing after the work, as the test asked")

    def _wait_until(self, ready: Any, context: grpc.ServicerContext, timeout: float) -> None:
        """Wait (holding the condition) until ready() or the call or the double ends."""
        deadline = time.monotonic() + timeout
        while not ready() and not self._closed and context.is_active():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._cond.wait(min(POLL_S, remaining))

    # ---- metrics, progress, early exit ----

    def ReportTrialMetricsBatch(
        self, request: trial_pb2.ReportTrialMetricsBatchRequest, context: grpc.ServicerContext
    ) -> trial_pb2.ReportTrialMetricsBatchResponse:
        reports = list(request.reports)
        if request.reports_json and self.reads_json_batches:
            reports = [_report_of(entry) for entry in json.loads(request.reports_json)]
        carries_progress = request.HasField("progress") and self.reads_batch_progress
        if not reports and not carries_progress:
            # The shipper's opening question (which seqs are stored?): not a batch the tests count.
            self.sequence_gate.wait(timeout=10.0)
            if self.refuse_sequence_queries:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, "refusing the opening question, as asked")
            with self._cond:
                self.sequence_queries += 1
                return trial_pb2.ReportTrialMetricsBatchResponse(
                    max_stored_seq=max(self._stored_seqs, default=0), ordered_batches=self.orders_batches
                )
        failure = self._enter("ReportTrialMetricsBatch", request, context)
        if request.after_seq:
            # As the master does: store it once every report up to after_seq is stored.
            with self._cond:
                self._cond.wait_for(lambda: request.after_seq in self._stored_seqs, timeout=10.0)
        else:
            self.metrics_gate.wait(timeout=10.0)
        stored = duplicates = 0
        with self._cond:
            for report in reports:
                if report.seq in self._stored_seqs:
                    duplicates += 1
                    continue
                self._stored_seqs.add(report.seq)
                self.stored_reports.append(report)
                stored += 1
            if carries_progress:
                self.batch_progress.append(request.progress)
            max_stored = max(self._stored_seqs, default=0)
            self._cond.notify_all()
        self._leave("ReportTrialMetricsBatch", failure, context)
        return trial_pb2.ReportTrialMetricsBatchResponse(
            stored=stored, duplicates=duplicates, max_stored_seq=max_stored, progress_stored=carries_progress
        )

    def ReportTrialProgress(
        self, request: trial_pb2.ReportTrialProgressRequest, context: grpc.ServicerContext
    ) -> trial_pb2.ReportTrialProgressResponse:
        failure = self._enter("ReportTrialProgress", request, context)
        self._leave("ReportTrialProgress", failure, context)
        return trial_pb2.ReportTrialProgressResponse()

    def ReportTrialSearcherEarlyExit(
        self, request: trial_pb2.ReportTrialSearcherEarlyExitRequest, context: grpc.ServicerContext
    ) -> trial_pb2.ReportTrialSearcherEarlyExitResponse:
        failure = self._enter("ReportTrialSearcherEarlyExit", request, context)
        with self._cond:
            already = self.early_exit_reported
            self.early_exit_reported = True
        if already:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "early exit already reported")
        self._leave("ReportTrialSearcherEarlyExit", failure, context)
        return trial_pb2.ReportTrialSearcherEarlyExitResponse()

    def GetBestSearcherValidationMetric(
        self, request: trial_pb2.GetBestSearcherValidationMetricRequest, context: grpc.ServicerContext
    ) -> trial_pb2.GetBestSearcherValidationMetricResponse:
        self._enter("GetBestSearcherValidationMetric", request, context)
        if self.best_metric is None:
            context.abort(grpc.StatusCode.NOT_FOUND, "no validation metric yet")
        return trial_pb2.GetBestSearcherValidationMetricResponse(metric=self.best_metric)

    # ---- searcher operations (the master's rules from domain/metrics/signals.py) ----

    def GetCurrentTrialSearcherOperation(
        self, request: trial_pb2.GetCurrentTrialSearcherOperationRequest, context: grpc.ServicerContext
    ) -> trial_pb2.GetCurrentTrialSearcherOperationResponse:
        self._enter("GetCurrentTrialSearcherOperation", request, context)
        with self._cond:
            length = self.signals.searcher_target or self.configured_length
            if length <= 0:
                return trial_pb2.GetCurrentTrialSearcherOperationResponse(completed=True)
            response = trial_pb2.GetCurrentTrialSearcherOperationResponse(
                completed=self.searcher_stopped or self.completed_length >= length
            )
        response.op.validate_after.request_id = "request-1"
        response.op.validate_after.length = length
        return response

    def CompleteTrialSearcherValidation(
        self, request: trial_pb2.CompleteTrialSearcherValidationRequest, context: grpc.ServicerContext
    ) -> trial_pb2.CompleteTrialSearcherValidationResponse:
        self._enter("CompleteTrialSearcherValidation", request, context)
        with self._cond:
            self.progress_at_completions.append(self.batch_progress[-1] if self.batch_progress else None)
            self.completed_length = max(
                self.completed_length, request.completed_operation.validate_after.length
            )
            if self.promotions:
                self.signals.searcher_target = self.promotions.pop(0)
                self._cond.notify_all()
        return trial_pb2.CompleteTrialSearcherValidationResponse()

    # ---- checkpoints ----

    def ReportCheckpoint(
        self, request: checkpoint_pb2.ReportCheckpointRequest, context: grpc.ServicerContext
    ) -> checkpoint_pb2.ReportCheckpointResponse:
        failure = self._enter("ReportCheckpoint", request, context)
        with self._cond:
            self.checkpoints.setdefault(request.checkpoint.uuid, request.checkpoint)
        self._leave("ReportCheckpoint", failure, context)
        return checkpoint_pb2.ReportCheckpointResponse()

    def GetCheckpoint(
        self, request: checkpoint_pb2.GetCheckpointRequest, context: grpc.ServicerContext
    ) -> checkpoint_pb2.GetCheckpointResponse:
        self._enter("GetCheckpoint", request, context)
        with self._cond:
            checkpoint = self.checkpoints.get(request.checkpoint_uuid)
        if checkpoint is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"checkpoint {request.checkpoint_uuid} not found")
        return checkpoint_pb2.GetCheckpointResponse(checkpoint=checkpoint)

    def PatchCheckpoints(
        self, request: checkpoint_pb2.PatchCheckpointsRequest, context: grpc.ServicerContext
    ) -> checkpoint_pb2.PatchCheckpointsResponse:
        self._enter("PatchCheckpoints", request, context)
        with self._cond:
            for patch in request.checkpoints:
                if patch.HasField("resources") and not patch.resources.resources:
                    self.checkpoints.pop(patch.uuid, None)
        return checkpoint_pb2.PatchCheckpointsResponse()

    # ---- allocation signals ----

    def AckAllocationPreemptionSignal(
        self, request: task_pb2.AckAllocationPreemptionSignalRequest, context: grpc.ServicerContext
    ) -> task_pb2.AckAllocationPreemptionSignalResponse:
        self._enter("AckAllocationPreemptionSignal", request, context)
        return task_pb2.AckAllocationPreemptionSignalResponse()

    def NotifyAllocationExiting(
        self, request: task_pb2.NotifyAllocationExitingRequest, context: grpc.ServicerContext
    ) -> task_pb2.NotifyAllocationExitingResponse:
        self._enter("NotifyAllocationExiting", request, context)
        return task_pb2.NotifyAllocationExitingResponse(released=True)

    def AllocationPreemptionSignal(
        self, request: task_pb2.AllocationPreemptionSignalRequest, context: grpc.ServicerContext
    ) -> task_pb2.AllocationPreemptionSignalResponse:
        self._enter("AllocationPreemptionSignal", request, context)
        with self._cond:
            self._wait_until(lambda: self.signals.preempt, context, float(request.timeout_seconds))
            return task_pb2.AllocationPreemptionSignalResponse(preempt=self.signals.preempt)

    def _signal(self, kind: int) -> task_pb2.AllocationSignal:
        return task_pb2.AllocationSignal(
            kind=kind,  # type: ignore[arg-type]
            preempt=self.signals.preempt,
            searcher_target=self.signals.searcher_target,
            reason=self.signals.reason,
        )

    def WatchAllocationSignals(
        self, request: task_pb2.WatchAllocationSignalsRequest, context: grpc.ServicerContext
    ) -> Iterator[task_pb2.AllocationSignal]:
        self._enter("WatchAllocationSignals", request, context)
        if self.watch_unimplemented:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "no signal stream on this master")
        with self._cond:
            self.streams_opened += 1
            break_after_first = self.streams_to_break > 0
            if break_after_first:
                self.streams_to_break -= 1
            no_room = self.streams_without_room > 0
            if no_room:
                self.streams_without_room -= 1
            last = SignalState(**vars(self.signals))
            first = self._signal(ALLOCATION_KIND.KIND_STATE)
        yield first
        if break_after_first:
            context.abort(grpc.StatusCode.UNAVAILABLE, "stream broke, as the test asked")
        if no_room:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "no room to wait, as the test asked")
        while True:
            with self._cond:
                seen = vars(last)
                self._wait_until(lambda seen=seen: vars(self.signals) != seen, context, 3600.0)
                if self._closed or not context.is_active():
                    return
                if self.signals.preempt and not last.preempt:
                    kind = ALLOCATION_KIND.KIND_PREEMPT
                elif self.signals.searcher_target != last.searcher_target:
                    kind = ALLOCATION_KIND.KIND_SEARCHER_TARGET
                else:
                    kind = ALLOCATION_KIND.KIND_STATE
                last = SignalState(**vars(self.signals))
                signal = self._signal(kind)
            yield signal


@dataclass
class RunningDouble:
    master: MasterDouble
    server: grpc.Server
    port: int

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.master.close()
        self.server.stop(grace=0).wait(timeout=5.0)


def start_master_double() -> RunningDouble:
    # The double answers only the calls trial code makes; the generated base class answers the
    # others with UNIMPLEMENTED, which is also what the type stubs' abstract methods stand for.
    master = MasterDouble()  # type: ignore[abstract]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="master-double"))
    api_pb2_grpc.add_CairnServicer_to_server(master, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return RunningDouble(master=master, server=server, port=port)


def wait_for(condition: Any, timeout: float = 5.0, interval: float = 0.01) -> bool:
    """Poll `condition()` until true or `timeout`; bounded in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return bool(condition())


def _report_of(entry: list[Any]) -> trial_pb2.MetricReport:
    """One report of a JSON batch ([seq, group, steps, time, metrics, batch_metrics]) as a message."""
    seq, group, steps, at, values, batches = entry
    report = trial_pb2.MetricReport(seq=seq, group=group, steps_completed=steps)
    report.report_time.FromNanoseconds(int(at * 1e9))
    report.metrics.update(values)
    for batch in batches or ():
        report.batch_metrics.add().update(batch)
    return report

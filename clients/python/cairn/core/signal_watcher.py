"""Listening for the master's signals to this allocation, in a background thread.

The master pushes signals on the WatchAllocationSignals stream (the current state first, then
each change). A stream that breaks is reopened with growing pauses; a master without the stream
(UNIMPLEMENTED) is asked with Determined's long poll instead. Once a preemption has arrived there
is nothing more to learn, and the watcher stops.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Iterator

import grpc

from cairn.api.v1 import task_pb2
from cairn.core.master_session import MasterSession
from cairn.core.retry import describe, status_code

log = logging.getLogger(__name__)

Kind = task_pb2.AllocationSignal.Kind


class AllocationSignalWatcher:
    def __init__(self, session: MasterSession, allocation_id: str) -> None:
        self._session = session
        self._settings = session.settings
        self._allocation_id = allocation_id
        self._preempted = threading.Event()
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._active_call: grpc.RpcContext | None = None
        self._thread: threading.Thread | None = None
        self.reason = ""
        self.searcher_target = 0
        self.using_long_poll = False
        # The master had no room for this watch to wait (it polls meanwhile); logged once.
        self.polling = False

    @property
    def started(self) -> bool:
        return self._thread is not None

    @property
    def preempted(self) -> bool:
        return self._preempted.is_set()

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self._run, name=f"cairn-signals-{self._allocation_id}", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._closing.set()
        with self._lock:
            if self._active_call is not None:
                self._active_call.cancel()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def _run(self) -> None:
        delays = self._settings.watch_retry.delays()
        while not self._closing.is_set() and not self._preempted.is_set():
            opened = time.monotonic()
            try:
                if self.using_long_poll:
                    self._long_poll(first=True)
                else:
                    self._follow_stream()
                    log.info("signal stream ended; reconnecting: allocation_id=%s", self._allocation_id)
            except grpc.RpcError as exc:
                if self._closing.is_set():
                    return
                if status_code(exc) == grpc.StatusCode.UNIMPLEMENTED and not self.using_long_poll:
                    log.info("the master has no signal stream; using the preemption long poll")
                    self.using_long_poll = True
                    continue
                if status_code(exc) == grpc.StatusCode.RESOURCE_EXHAUSTED and not self._preempted.is_set():
                    # The state as it is came first; what changes is learned at the next ask.
                    self._poll_later()
                    continue
                log.warning(
                    "watching for preemption failed; retrying: allocation_id=%s error=%s",
                    self._allocation_id,
                    describe(exc),
                )
            if self._preempted.is_set():
                return
            if time.monotonic() - opened >= self._settings.watch_healthy_after_s:
                delays = self._settings.watch_retry.delays()
            self._closing.wait(next(delays))

    def _poll_later(self) -> None:
        if not self.polling:
            self.polling = True
            log.info(
                "the master has no room for this signal watch to wait; asking every ~%.0f s: "
                "allocation_id=%s",
                self._settings.watch_busy_poll_s,
                self._allocation_id,
            )
        self._closing.wait(self._settings.watch_busy_poll_s * random.uniform(0.8, 1.2))

    def _register(self, call: grpc.RpcContext) -> bool:
        """Remember the call so close() can cancel it; False when closing already began."""
        with self._lock:
            if self._closing.is_set():
                call.cancel()
                return False
            self._active_call = call
            return True

    def _forget(self) -> None:
        with self._lock:
            self._active_call = None

    def _follow_stream(self) -> None:
        call = self._session.stub.WatchAllocationSignals(
            task_pb2.WatchAllocationSignalsRequest(allocation_id=self._allocation_id),
            metadata=self._session.metadata,
        )
        if not self._register(call):
            return
        try:
            signals: Iterator[task_pb2.AllocationSignal] = call
            for signal in signals:
                self._apply(signal)
                if self._preempted.is_set():
                    call.cancel()
                    return
        finally:
            self._forget()

    def _long_poll(self, first: bool) -> None:
        # Determined's first poll answers at once, so a preemption already pending is seen early.
        wait_s = 0 if first else self._settings.long_poll_s
        while not self._closing.is_set() and not self._preempted.is_set():
            future = self._session.stub.AllocationPreemptionSignal.future(
                task_pb2.AllocationPreemptionSignalRequest(
                    allocation_id=self._allocation_id, timeout_seconds=wait_s
                ),
                timeout=wait_s + self._settings.call_timeout_s,
                metadata=self._session.metadata,
            )
            if not self._register(future):
                return
            try:
                response = future.result()
            except grpc.FutureCancelledError:
                return
            finally:
                self._forget()
            if response.preempt:
                self._mark_preempted("")
            wait_s = self._settings.long_poll_s

    def _apply(self, signal: task_pb2.AllocationSignal) -> None:
        if signal.searcher_target != self.searcher_target:
            if signal.kind == Kind.KIND_SEARCHER_TARGET:
                log.info(
                    "searcher target changed: allocation_id=%s target=%d",
                    self._allocation_id,
                    signal.searcher_target,
                )
            self.searcher_target = signal.searcher_target
        if signal.preempt:
            self._mark_preempted(signal.reason)

    def _mark_preempted(self, reason: str) -> None:
        if self._preempted.is_set():
            return
        self.reason = reason
        log.info("preemption signal received: allocation_id=%s reason=%s", self._allocation_id, reason or "-")
        self._preempted.set()

"""`core.preempt`: whether the master wants this trial to stop soon (Determined's PreemptContext).

Pause, cancel, a searcher's stop and the scheduler's preemption all arrive as a preemption: the
trial should checkpoint and exit 0. Acknowledging first tells the master that the exit is a
"resume me later", not the trial's end.
"""

from __future__ import annotations

import abc
import enum
import logging
import threading

from cairn.api.v1 import task_pb2
from cairn.core.distributed import DistributedContext
from cairn.core.master_session import MasterSession
from cairn.core.signal_watcher import AllocationSignalWatcher

log = logging.getLogger(__name__)


class PreemptMode(enum.Enum):
    """Who asks the master in a multi-process trial. With one process, it asks itself."""

    WorkersAskChief = "WORKERS_ASK_CHIEF"
    ChiefOnly = "CHIEF_ONLY"
    WorkersAskMaster = "WORKERS_ASK_MASTER"


class PreemptContext(abc.ABC):
    @abc.abstractmethod
    def should_preempt(self, auto_ack: bool = True) -> bool:
        """True once the master asked this trial to stop. Cheap: call it every batch.

        With `auto_ack`, the first True also acknowledges the signal, so the checkpoint-and-exit-0
        that should follow counts as a preemption to resume from.
        """

    @abc.abstractmethod
    def acknowledge_preemption_signal(self) -> None:
        """Tell the master the trial heard the preemption and will exit soon."""

    @abc.abstractmethod
    def start(self) -> None:
        """Start watching (the context's `__enter__` does this)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop watching."""


class ClusterPreemptContext(PreemptContext):
    """Who watches the master depends on the mode (Determined's): the chief alone, which tells the
    others through a broadcast on each call, so every rank sees should_preempt() flip at the same
    call (WorkersAskChief, the default: every rank must call it equally often); the chief alone,
    with no other rank calling it (ChiefOnly); or every rank on its own (WorkersAskMaster)."""

    def __init__(
        self,
        session: MasterSession,
        allocation_id: str,
        distributed: DistributedContext,
        mode: PreemptMode = PreemptMode.WorkersAskChief,
    ) -> None:
        self._session = session
        self._allocation_id = allocation_id
        self._distributed = distributed
        self.mode = PreemptMode(mode)
        self.watcher: AllocationSignalWatcher | None = None
        if distributed.is_chief or self.mode == PreemptMode.WorkersAskMaster:
            self.watcher = AllocationSignalWatcher(session, allocation_id)
        self._started = False
        self._ack_lock = threading.Lock()
        self._acknowledged = False

    def start(self) -> None:
        self._started = True
        if self.watcher is not None:
            self.watcher.start()

    def close(self) -> None:
        if self.watcher is not None:
            self.watcher.close()

    def should_preempt(self, auto_ack: bool = True) -> bool:
        if not self._started:
            raise RuntimeError(
                "the Core API is not running: call should_preempt() inside `with cairn.core.init() as core:`"
            )
        if self.watcher is None:
            if self.mode == PreemptMode.ChiefOnly:
                raise RuntimeError(
                    "preempt_mode is ChiefOnly but should_preempt() was called on rank "
                    f"{self._distributed.rank}"
                )
            answer = self._distributed.broadcast(None)
            return bool(answer)
        preempted = self.watcher.preempted
        if preempted and auto_ack:
            with self._ack_lock:
                if not self._acknowledged:
                    self._send_ack()
        if self.mode == PreemptMode.WorkersAskChief and self._distributed.size > 1:
            self._distributed.broadcast(preempted)
        return preempted

    def acknowledge_preemption_signal(self) -> None:
        with self._ack_lock:
            self._send_ack()

    def _send_ack(self) -> None:
        self._session.call(
            self._session.stub.AckAllocationPreemptionSignal,
            task_pb2.AckAllocationPreemptionSignalRequest(allocation_id=self._allocation_id),
            what="AckAllocationPreemptionSignal",
        )
        self._acknowledged = True
        log.info("preemption acknowledged: allocation_id=%s", self._allocation_id)


class LocalPreemptContext(PreemptContext):
    """Off cluster nobody preempts."""

    def __init__(self, mode: PreemptMode = PreemptMode.WorkersAskChief) -> None:
        self.mode = PreemptMode(mode)

    def should_preempt(self, auto_ack: bool = True) -> bool:
        return False

    def acknowledge_preemption_signal(self) -> None:
        """Nothing to acknowledge."""

    def start(self) -> None:
        """Nothing to watch."""

    def close(self) -> None:
        """Nothing to stop."""

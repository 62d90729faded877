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
        self.watcher = AllocationSignalWatcher(session, allocation_id)
        self._ack_lock = threading.Lock()
        self._acknowledged = False

    def start(self) -> None:
        self.watcher.start()

    def close(self) -> None:
        self.watcher.close()

    def should_preempt(self, auto_ack: bool = True) -> bool:
        if not self.watcher.started:
            raise RuntimeError(
                "the Core API is not running: call should_preempt() inside `with cairn.core.init() as core:`"
            )
        if not self.watcher.preempted:
            return False
        if auto_ack:
            with self._ack_lock:
                if not self._acknowledged:
                    self._send_ack()
        return True

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

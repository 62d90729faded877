"""`core.searcher`: how long to train (Determined's SearcherContext, ≤0.37 semantics).

Each operation says "train until `length` units, validate, report the searcher metric". On a
cluster the master hands them out: the configured length (searcher.max_time or max_length), or in
Cairn's promotion mode the searcher's target, raised while the trial runs when it is promoted.
When no operation is left the generator ends and the trial should checkpoint and exit 0.
"""

from __future__ import annotations

import abc
import enum
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import cairn.task_environment as tenv
from cairn.api.v1 import task_pb2, trial_pb2
from cairn.core.distributed import DistributedContext
from cairn.core.errors import SearcherNotConfiguredError
from cairn.core.json_values import plain_count, plain_number
from cairn.core.master_session import MasterSession

log = logging.getLogger(__name__)

LOCAL_LENGTH_ENV = tenv.SEARCHER_LENGTH


class SearcherMode(enum.Enum):
    WorkersAskChief = "WORKERS_ASK_CHIEF"
    ChiefOnly = "CHIEF_ONLY"


class Unit(enum.Enum):
    EPOCHS = "EPOCHS"
    RECORDS = "RECORDS"
    BATCHES = "BATCHES"


class SearcherOperation:
    """Train until `length` (absolute, in the unit of the searcher's config), then report."""

    def __init__(
        self,
        length: int,
        *,
        on_progress: Callable[[float], None],
        on_completed: Callable[[float], None],
        is_chief: bool = True,
    ) -> None:
        self._length = length
        self._on_progress = on_progress
        self._on_completed = on_completed
        self._is_chief = is_chief
        self._completed = False

    @property
    def length(self) -> int:
        return self._length

    @property
    def completed(self) -> bool:
        return self._completed

    def report_progress(self, length: float) -> None:
        """How far training got, in the unit of `.length` (the WebUI shows length / .length)."""
        if not self._is_chief:
            raise RuntimeError("only the chief (rank 0) may call op.report_progress()")
        if self._completed and length != self._length:
            raise RuntimeError("op.report_progress() must not be called after op.report_completed()")
        done = plain_number(length, "length")
        if done < 0:
            raise ValueError(f"length: must be >= 0, not {length}")
        self._on_progress(min(1.0, done / self._length))

    def report_completed(self, searcher_metric: float) -> None:
        """The operation is done; `searcher_metric` is the value of the searcher's metric."""
        if not self._is_chief:
            raise RuntimeError("only the chief (rank 0) may call op.report_completed()")
        if self._completed:
            raise RuntimeError("op.report_completed() may be called only once")
        metric = plain_number(searcher_metric, "searcher_metric")
        self._on_completed(metric)
        self._completed = True


def configured_units(config: Mapping[str, Any]) -> Unit | None:
    """The unit of searcher.max_length when it names one ({"epochs": 10}); None otherwise."""
    searcher = config.get("searcher") or {}
    max_length = searcher.get("max_length") if isinstance(searcher, Mapping) else None
    if isinstance(max_length, Mapping):
        for unit in Unit:
            if unit.value.lower() in max_length:
                return unit
    return None


class SearcherContext(abc.ABC):
    @abc.abstractmethod
    def operations(
        self, searcher_mode: SearcherMode = SearcherMode.WorkersAskChief, auto_ack: bool = True
    ) -> Iterator[SearcherOperation]:
        """The operations for this trial, one after another; call op.report_completed() on each."""

    @abc.abstractmethod
    def acknowledge_out_of_ops(self) -> None:
        """Tell the master the trial saw there is nothing left to do and is about to exit, so it
        may be started again should the searcher give it more (operations() does this at its end
        unless auto_ack=False)."""

    @abc.abstractmethod
    def get_configured_units(self) -> Unit | None: ...


def _require_completed(op: SearcherOperation) -> None:
    if not op.completed:
        raise RuntimeError("you must call op.report_completed() on each operation before asking for the next")


class ClusterSearcherContext(SearcherContext):
    """The chief asks the master for operations. In WorkersAskChief mode (the default) every rank
    iterates operations() and the chief hands each operation's length to the others (a broadcast),
    so all ranks train to the same length and stop together; in ChiefOnly mode only the chief may."""

    def __init__(
        self,
        session: MasterSession,
        *,
        trial_id: int,
        allocation_id: str,
        config: Mapping[str, Any],
        report_progress: Callable[[float], None],
        flush_reports: Callable[[], object],
        distributed: DistributedContext | None = None,
    ) -> None:
        self._session = session
        self._trial_id = trial_id
        self._allocation_id = allocation_id
        self._config = config
        # The train context's: progress goes with its metric batches, not a call of its own; and
        # what was reported (progress, the metrics behind the result) is stored before an
        # operation is said to be completed, as when each was a call of its own.
        self._report_progress = report_progress
        self._flush_reports = flush_reports
        self._distributed = distributed or DistributedContext.single()

    def _current(self) -> trial_pb2.GetCurrentTrialSearcherOperationResponse:
        return self._session.call(
            self._session.stub.GetCurrentTrialSearcherOperation,
            trial_pb2.GetCurrentTrialSearcherOperationRequest(trial_id=self._trial_id),
            what="GetCurrentTrialSearcherOperation",
        )

    def operations(
        self, searcher_mode: SearcherMode = SearcherMode.WorkersAskChief, auto_ack: bool = True
    ) -> Iterator[SearcherOperation]:
        mode = SearcherMode(searcher_mode)
        dist = self._distributed
        shared = mode == SearcherMode.WorkersAskChief and dist.size > 1
        if not dist.is_chief:
            if mode == SearcherMode.ChiefOnly:
                raise RuntimeError(
                    f"searcher_mode is ChiefOnly but operations() was called on rank {dist.rank}"
                )
            yield from self._worker_operations()
            return
        last_completed = 0
        first = True
        while True:
            try:
                response = self._current()
                length = int(response.op.validate_after.length)
                if length == 0 and first:
                    raise SearcherNotConfiguredError(
                        "the experiment gives the searcher no training length, so there are no searcher "
                        "operations: set searcher.max_time (with searcher.time_metric) or "
                        "searcher.max_length in the experiment config, or train for a length of your own "
                        "and exit 0 when done"
                    )
            except Exception as exc:
                if shared:
                    dist.broadcast(("error", str(exc)))
                raise
            first = False
            done = response.completed or length == 0
            if not done and length <= last_completed:
                # The master would hand out an operation already done; training it again would loop.
                log.warning("searcher operation of length %d was already completed; stopping", length)
                done = True
            if shared:
                dist.broadcast(("end", 0) if done else ("op", length))
            if done:
                break
            op = self._operation(response.op)
            yield op
            _require_completed(op)
            last_completed = length
        if auto_ack:
            self.acknowledge_out_of_ops()

    def _worker_operations(self) -> Iterator[SearcherOperation]:
        """A non-chief rank's operations: the lengths the chief broadcasts; only the chief reports."""

        def not_here(_: float) -> None:
            raise RuntimeError("only the chief (rank 0) reports on searcher operations")

        while True:
            kind, value = self._distributed.broadcast(None)
            if kind == "error":
                raise RuntimeError(f"the chief could not get a searcher operation: {value}")
            if kind == "end":
                return
            yield SearcherOperation(int(value), on_progress=not_here, on_completed=not_here, is_chief=False)

    def _operation(self, wire: trial_pb2.TrialOperation) -> SearcherOperation:
        length = int(wire.validate_after.length)

        def completed(metric: float) -> None:
            completed_op = trial_pb2.TrialOperation()
            completed_op.CopyFrom(wire)
            self._flush_reports()
            self._session.call(
                self._session.stub.CompleteTrialSearcherValidation,
                trial_pb2.CompleteTrialSearcherValidationRequest(
                    trial_id=self._trial_id, completed_operation=completed_op, searcher_metric=metric
                ),
                what="CompleteTrialSearcherValidation",
            )
            log.info(
                "searcher operation completed: trial_id=%s length=%d metric=%s",
                self._trial_id,
                length,
                metric,
            )

        return SearcherOperation(length, on_progress=self._report_progress, on_completed=completed)

    def acknowledge_out_of_ops(self) -> None:
        if not self._distributed.is_chief:
            return
        self._session.call(
            self._session.stub.AckAllocationPreemptionSignal,
            task_pb2.AckAllocationPreemptionSignalRequest(allocation_id=self._allocation_id),
            what="AckAllocationPreemptionSignal",
        )

    def get_configured_units(self) -> Unit | None:
        return configured_units(self._config)


def local_searcher_length(given: int | None) -> int | None:
    """The caller's length, else $CAIRN_SEARCHER_LENGTH, else None."""
    if given is not None:
        length = plain_count(given, "searcher_length")
    else:
        raw = os.environ.get(LOCAL_LENGTH_ENV, "").strip()
        if not raw:
            return None
        try:
            length = int(raw)
        except ValueError:
            raise ValueError(f"{LOCAL_LENGTH_ENV}: must be an integer, not {raw!r}") from None
    if length < 1:
        raise ValueError(f"searcher_length: must be >= 1, not {length}")
    return length


class LocalSearcherContext(SearcherContext):
    """Off cluster: one operation of the length the caller gave (init(searcher_length=N) or
    $CAIRN_SEARCHER_LENGTH), 1 when none was given."""

    def __init__(self, length: int | None, is_chief: bool = True) -> None:
        self._length = length
        # Under torchrun off the cluster every rank iterates; only the chief reports.
        self._is_chief = is_chief

    def operations(
        self, searcher_mode: SearcherMode = SearcherMode.WorkersAskChief, auto_ack: bool = True
    ) -> Iterator[SearcherOperation]:
        SearcherMode(searcher_mode)
        length = self._length
        if length is None:
            log.warning(
                "no searcher length given off cluster: one operation of length 1; pass "
                "cairn.core.init(searcher_length=N) or set %s",
                LOCAL_LENGTH_ENV,
            )
            length = 1

        def progress(fraction: float) -> None:
            log.info("searcher progress: %.1f%%", fraction * 100)

        def completed(metric: float) -> None:
            log.info("searcher operation completed: length=%d searcher_metric=%s", length, metric)

        op = SearcherOperation(length, on_progress=progress, on_completed=completed, is_chief=self._is_chief)
        yield op
        if self._is_chief:
            _require_completed(op)

    def acknowledge_out_of_ops(self) -> None:
        pass

    def get_configured_units(self) -> Unit | None:
        return None

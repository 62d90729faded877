"""`core.train`: metrics, progress and early exits of a trial (Determined's TrainContext).

Reports are checked the same way on and off the cluster, so a script that runs on a laptop does
not fail later on the cluster over a bad value.
"""

from __future__ import annotations

import abc
import enum
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc

from cairn.api.v1 import trial_pb2
from cairn.core.errors import MasterCallError
from cairn.core.json_values import JsonValue, plain_count, plain_mapping, plain_number
from cairn.core.master_session import MasterSession
from cairn.core.metrics_shipper import MetricsShipper
from cairn.core.tensorboard import TensorboardFiles, TensorboardMode, default_path
from cairn.tensorboard.uploader import Mangler, Selector

log = logging.getLogger(__name__)

TRAINING = "training"
VALIDATION = "validation"


class EarlyExitReason(enum.Enum):
    INVALID_HP = "EXITED_REASON_INVALID_HP"
    USER_REQUESTED_STOP = "EXITED_REASON_USER_REQUESTED_STOP"


_EARLY_EXIT_WIRE = {
    EarlyExitReason.INVALID_HP: trial_pb2.TrialEarlyExit.EXITED_REASON_INVALID_HP,
    EarlyExitReason.USER_REQUESTED_STOP: trial_pb2.TrialEarlyExit.EXITED_REASON_USER_REQUESTED_STOP,
}


def _check_group(group: Any) -> str:
    if not isinstance(group, str) or not group:
        raise ValueError(f"group: must be a non-empty string, not {group!r}")
    if "." in group:
        raise ValueError(f"group: {group!r} must not contain '.'")
    return group


def _validation_metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Determined's rules for validation metrics: a None is a bug in the evaluation code and fails
    loudly; bytes cannot be stored and are dropped with a warning."""
    if not isinstance(metrics, Mapping):
        raise TypeError(f"metrics: must be a dict, not {type(metrics).__name__}")
    kept: dict[str, Any] = {}
    dropped = []
    for name, value in metrics.items():
        if value is None:
            raise RuntimeError(f"validation metric {name!r} returned an invalid scalar value: None")
        if isinstance(value, (bytes, bytearray)):
            dropped.append(str(name))
            continue
        kept[name] = value
    if dropped:
        log.warning("removed validation metrics that are bytes, not values: %s", ", ".join(dropped))
    return kept


class TrainContext(abc.ABC):
    """Report training and validation metrics, progress, and early exits to the master."""

    # Set by each subclass: the trial's TensorBoard directory (core/tensorboard.py).
    _tensorboard: TensorboardFiles

    def get_tensorboard_path(self) -> Path:
        """The directory whose TensorBoard files are uploaded to checkpoint storage (write yours
        here in TensorboardMode.MANUAL)."""
        return self._tensorboard.path

    def upload_tensorboard_files(
        self, selector: Selector | None = None, mangler: Mangler | None = None
    ) -> None:
        """TensorboardMode.MANUAL: upload the new and changed TensorBoard files of
        `get_tensorboard_path()` (those `selector(path)` takes, stored as `mangler(path, rank)`)."""
        self._tensorboard.upload(selector, mangler)

    def report_training_metrics(
        self,
        steps_completed: int,
        metrics: Mapping[str, Any],
        batch_metrics: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        """Report the training metrics after `steps_completed` batches (group "training")."""
        self._report(TRAINING, steps_completed, metrics, batch_metrics)

    def report_validation_metrics(self, steps_completed: int, metrics: Mapping[str, Any]) -> None:
        """Report validation metrics (group "validation"); the searcher reads its metric here."""
        self._report(VALIDATION, steps_completed, metrics, None)

    def report_metrics(self, group: str, steps_completed: int, metrics: Mapping[str, Any]) -> None:
        """Report metrics of a group of your own (a name without '.')."""
        self._report(_check_group(group), steps_completed, metrics, None)

    def _report(
        self,
        group: str,
        steps_completed: int,
        metrics: Mapping[str, Any],
        batch_metrics: Sequence[Mapping[str, Any]] | None,
    ) -> None:
        self._raise_if_failed()
        steps = plain_count(steps_completed, "steps_completed")
        if group == VALIDATION:
            metrics = _validation_metrics(metrics)
        plain = plain_mapping(metrics, "metrics")
        plain_batches = None
        if batch_metrics is not None:
            if isinstance(batch_metrics, (str, bytes, Mapping)) or not isinstance(batch_metrics, Sequence):
                raise TypeError(f"batch_metrics: must be a list of dicts, not {type(batch_metrics).__name__}")
            plain_batches = [
                plain_mapping(batch, f"batch_metrics[{index}]") for index, batch in enumerate(batch_metrics)
            ]
        self._submit(group, steps, plain, plain_batches)
        self._tensorboard.on_report(group, steps, plain, plain_batches)

    def report_progress(self, progress: float) -> None:
        """Report the fraction of the trial's work done, in [0, 1] (shown in the WebUI). It goes with
        the next metric batch (only the latest of several does), not in a call of its own, and is
        stored by the time `flush()` or the context's close returns."""
        self._raise_if_failed()
        fraction = plain_number(progress, "progress")
        if math.isnan(fraction) or not 0.0 <= fraction <= 1.0:
            raise ValueError(f"progress: must be between 0 and 1, not {progress}")
        self._send_progress(fraction)

    def report_early_exit(self, reason: EarlyExitReason) -> None:
        """Tell the searcher this trial stops early (invalid hyperparameters, or your own stop).

        Sent even after a metrics failure: the searcher needs it more than the metrics; that
        failure is raised when the context closes."""
        self._send_early_exit(EarlyExitReason(reason))

    @abc.abstractmethod
    def get_experiment_best_validation(self) -> float | None:
        """The best searcher metric any trial of the experiment reported; None when none has."""

    @abc.abstractmethod
    def start(self) -> None:
        """Start background work (the metrics sender); `cairn.core.init()`'s context does this."""

    @abc.abstractmethod
    def close(self, flush_timeout: float | None = None) -> None:
        """Send what is queued (for at most `flush_timeout`) and stop; raises what failed."""

    @abc.abstractmethod
    def _raise_if_failed(self) -> None:
        """Raise a background failure the training code has not heard of yet."""

    @abc.abstractmethod
    def _submit(
        self,
        group: str,
        steps_completed: int,
        metrics: dict[str, JsonValue],
        batch_metrics: list[dict[str, JsonValue]] | None,
    ) -> None: ...

    @abc.abstractmethod
    def _send_progress(self, progress: float) -> None: ...

    @abc.abstractmethod
    def _send_early_exit(self, reason: EarlyExitReason) -> None: ...


class ClusterTrainContext(TrainContext):
    def __init__(
        self,
        session: MasterSession,
        *,
        trial_id: int,
        trial_run_id: int,
        experiment_id: int,
        allocation_id: str,
        is_chief: bool = True,
        tensorboard: TensorboardFiles | None = None,
    ) -> None:
        self._session = session
        self._tensorboard = tensorboard or TensorboardFiles(
            TensorboardMode.MANUAL, default_path(allocation_id, 0), None
        )
        self._trial_id = trial_id
        self._experiment_id = experiment_id
        # Only the chief reports: the others' reports would be a second copy of the same steps.
        self._is_chief = is_chief
        self._shipper = MetricsShipper(
            session, trial_id=trial_id, trial_run_id=trial_run_id, allocation_id=allocation_id
        )

    def start(self) -> None:
        if self._is_chief:
            self._shipper.start()

    def close(self, flush_timeout: float | None = None) -> None:
        try:
            self._tensorboard.close()
        finally:
            if self._is_chief:
                self._shipper.close(flush_timeout)

    def _check_chief(self, what: str) -> None:
        if not self._is_chief:
            raise RuntimeError(
                f"only the chief (rank 0) may {what}: guard it with `if core.distributed.rank == 0:`"
            )

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every metric reported so far is stored by the master."""
        if not self._is_chief:
            return True
        return self._shipper.flush(timeout)

    def before_checkpoint(self) -> None:
        """A checkpoint is about to count: the metrics reported before it are stored first, and
        the TensorBoard files written so far are uploaded beside it."""
        self.flush()
        self._tensorboard.sync()

    def _raise_if_failed(self) -> None:
        if self._is_chief:
            self._shipper.raise_if_failed()

    def _submit(
        self,
        group: str,
        steps_completed: int,
        metrics: dict[str, JsonValue],
        batch_metrics: list[dict[str, JsonValue]] | None,
    ) -> None:
        self._check_chief("report metrics")
        self._shipper.submit(group, steps_completed, metrics, batch_metrics)

    def _send_progress(self, progress: float) -> None:
        self._check_chief("report progress")
        # With the next metric batch (in order with the reports before it), stored by the time a
        # flush or the context's close returns.
        self._shipper.report_progress(progress)

    def _send_early_exit(self, reason: EarlyExitReason) -> None:
        self._check_chief("report an early exit")
        request = trial_pb2.ReportTrialSearcherEarlyExitRequest(
            trial_id=self._trial_id, early_exit=trial_pb2.TrialEarlyExit(reason=_EARLY_EXIT_WIRE[reason])
        )
        try:
            self._session.call(
                self._session.stub.ReportTrialSearcherEarlyExit, request, what="ReportTrialSearcherEarlyExit"
            )
        except MasterCallError as exc:
            if exc.code != grpc.StatusCode.FAILED_PRECONDITION:
                raise
            # As in Determined: the first reason stands; a second report changes nothing.
            log.warning("early exit already reported for trial %s; ignoring %s", self._trial_id, reason.name)
            return
        log.info("early exit reported: trial_id=%s reason=%s", self._trial_id, reason.name)

    def get_experiment_best_validation(self) -> float | None:
        try:
            response = self._session.call(
                self._session.stub.GetBestSearcherValidationMetric,
                trial_pb2.GetBestSearcherValidationMetricRequest(experiment_id=self._experiment_id),
                what="GetBestSearcherValidationMetric",
            )
        except MasterCallError as exc:
            if exc.code == grpc.StatusCode.NOT_FOUND:
                return None
            raise
        return response.metric if response.HasField("metric") else None


class LocalTrainContext(TrainContext):
    """Off cluster: reports are checked and logged, right away, so nothing runs in the background;
    no TensorBoard files are written or uploaded."""

    def __init__(self, tensorboard_path: Path | None = None) -> None:
        self._tensorboard = TensorboardFiles(
            TensorboardMode.MANUAL, tensorboard_path or default_path("local", 0), None
        )

    def start(self) -> None:
        """Nothing to start."""

    def close(self, flush_timeout: float | None = None) -> None:
        """Nothing queued."""

    def _raise_if_failed(self) -> None:
        """Nothing fails in the background."""

    def _submit(
        self,
        group: str,
        steps_completed: int,
        metrics: dict[str, JsonValue],
        batch_metrics: list[dict[str, JsonValue]] | None,
    ) -> None:
        extra = f" batch_metrics={len(batch_metrics)}" if batch_metrics else ""
        log.info("%s metrics: steps_completed=%d %s%s", group, steps_completed, metrics, extra)

    def _send_progress(self, progress: float) -> None:
        log.info("progress: %.1f%%", progress * 100)

    def _send_early_exit(self, reason: EarlyExitReason) -> None:
        log.info("early exit: reason=%s", reason.name)

    def get_experiment_best_validation(self) -> float | None:
        return None

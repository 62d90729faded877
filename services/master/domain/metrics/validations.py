"""What a stored validation tells the searcher: the trial's latest and best validation, and the
searcher event that carries its metric, in the transaction that stores it (so a stored validation
always reaches the searcher); and a searcher operation completed without such a validation, passed
on as one."""

from __future__ import annotations

import math
from typing import Any

from cairn.searcher.v1 import searcher_pb2 as spb
from services.common.logging import get_logger
from services.master.domain.config import config_view
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.states import TERMINAL
from services.master.domain.metrics.summaries import searcher_metric
from services.master.domain.trials import searcher_outbox
from services.master.store import models

log = get_logger(__name__)

# How NaN and the infinities are stored (reports.sanitize) and how the stock client sends them
# (determined.util.json_encode; its bindings write NaN "Nan"): the searcher hears them as numbers,
# so a diverged trial ranks last instead of going unheard.
NON_FINITE = {"NaN": math.nan, "Nan": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def for_searcher(value: Any) -> Any:
    """A stored metric value as the searcher takes it: a non-finite number's string as that number."""
    return NON_FINITE.get(value, value) if isinstance(value, str) else value


def record_validation(
    ctx: MasterContext,
    w: Work,
    trial: models.Trial,
    exp: models.Experiment,
    row_id: int,
    steps_completed: int,
    metrics: dict[str, Any],
) -> None:
    trial.latest_validation_id = row_id
    value = searcher_metric(exp, metrics)
    if value is not None:
        smaller = config_view(exp.config).smaller_is_better
        best = trial.searcher_metric_value
        if best is None or (value < best if smaller else value > best):
            trial.searcher_metric_value = value
            trial.best_validation_id = row_id
    if exp.state not in TERMINAL:
        event = spb.SearcherEvent(
            validation_completed=spb.ValidationCompleted(
                request_id=trial.request_id, steps_completed=steps_completed
            )
        )
        numeric = {k: for_searcher(v) for k, v in metrics.items() if isinstance(v, (int, float, str, bool))}
        event.validation_completed.metrics.update(numeric)
        searcher_outbox.enqueue(ctx, w, exp.id, event)


def _tells_searcher(exp: models.Experiment, row: models.Metric | None, length: int) -> bool:
    """Whether a validation already gave the searcher this trial's result at `length`."""
    if row is None or searcher_metric(exp, row.metrics) is None:
        return False
    unit = config_view(exp.config).time_unit
    elapsed = row.metrics.get(unit)
    if elapsed is None and unit == "batches":
        elapsed = row.steps_completed
    return isinstance(elapsed, (int, float)) and not isinstance(elapsed, bool) and elapsed >= length


def forward_operation_result(
    ctx: MasterContext, w: Work, trial: models.Trial, length: int, value: float
) -> bool:
    """A searcher operation was completed with `op.report_completed(value)`. The searcher ranks trials
    by their validations; where the latest one does not carry the searcher metric at the operation's
    length, the completed operation is forwarded as that validation. Without it, a promotion-mode
    search waits forever on a trial that stopped at its rung without reporting the metric."""
    exp = w.session.get_one(models.Experiment, trial.experiment_id)
    if exp.state in TERMINAL:
        return False
    latest = w.session.get(models.Metric, trial.latest_validation_id) if trial.latest_validation_id else None
    if _tells_searcher(exp, latest, length):
        return False
    view = config_view(exp.config)
    metrics: dict[str, Any] = {view.time_unit: length}
    if view.searcher_metric:
        metrics[view.searcher_metric] = value
    event = spb.SearcherEvent(
        validation_completed=spb.ValidationCompleted(request_id=trial.request_id, steps_completed=length)
    )
    event.validation_completed.metrics.update(metrics)
    searcher_outbox.enqueue(ctx, w, exp.id, event)
    log.info("searcher result taken from the completed operation", trial_id=trial.id, length=length)
    return True

"""Metrics intake: batched reports stored once each, trial summaries kept current, validations
forwarded to the searcher in the same transaction (so a stored validation always reaches it).

A report from an older run of the trial (a restart resumed from an earlier checkpoint) is refused;
when a new run reports steps that an older run had already passed, the older run's rows past that
point are archived, as Determined does, so curves show what the surviving run did.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update

from cairn.searcher.v1 import searcher_pb2 as spb
from services.common.logging import get_logger
from services.common.principal import Principal
from services.master.domain import allocation_access, searcher_outbox
from services.master.domain.clock import utcnow
from services.master.domain.config import config_view
from services.master.domain.context import MasterContext, Work
from services.master.domain.errors import FailedPrecondition, InvalidArgument, NotFound
from services.master.domain.states import TERMINAL
from services.master.domain.topics import trial_topic
from services.master.store import models

log = get_logger(__name__)

TRAINING = "training"
VALIDATION = "validation"
# Determined's names for the two built-in groups inside summary_metrics.
SUMMARY_KEYS = {TRAINING: "avg_metrics", VALIDATION: "validation_metrics"}


@dataclass(frozen=True)
class Report:
    group: str
    steps_completed: int
    metrics: dict[str, Any]
    report_time: datetime | None = None
    batch_metrics: list[Any] | None = None
    seq: int | None = None


def sanitize(value: Any) -> Any:
    """JSON has no NaN or infinity: store them as Determined does, as strings."""
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, dict):
        return {k: sanitize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [sanitize(v) for v in value]
    return value


def _check_report(index: int, report: Report) -> None:
    where = f"reports[{index}]"
    if not report.group or "." in report.group:
        raise InvalidArgument(f"{where}.group: must be a non-empty name without '.'")
    if report.steps_completed < 0:
        raise InvalidArgument(f"{where}.steps_completed: must be >= 0")
    if report.seq is not None and report.seq <= 0:
        raise InvalidArgument(f"{where}.seq: must be >= 1")


def _update_summary(trial: models.Trial, group: str, metrics: dict[str, Any]) -> None:
    summary = dict(trial.summary_metrics or {})
    key = SUMMARY_KEYS.get(group, group)
    section = dict(summary.get(key) or {})
    for name, value in metrics.items():
        entry = dict(section.get(name) or {})
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            count = int(entry.get("count", 0)) + 1
            total = float(entry.get("sum", 0.0)) + float(value)
            entry.update(
                count=count,
                sum=total,
                min=min(float(entry.get("min", value)), float(value)),
                max=max(float(entry.get("max", value)), float(value)),
                mean=total / count,
                last=value,
                type="number",
            )
        else:
            entry.update(last=sanitize(value), type="string" if isinstance(value, str) else "other")
        section[name] = entry
    summary[key] = section
    trial.summary_metrics = summary


def _searcher_metric(exp: models.Experiment, metrics: dict[str, Any]) -> float | None:
    name = config_view(exp.config).searcher_metric
    value = metrics.get(name) if name else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _record_validation(
    ctx: MasterContext, w: Work, trial: models.Trial, exp: models.Experiment, row: models.Metric
) -> None:
    trial.latest_validation_id = row.id
    value = _searcher_metric(exp, row.metrics)
    if value is not None:
        smaller = config_view(exp.config).smaller_is_better
        best = trial.searcher_metric_value
        if best is None or (value < best if smaller else value > best):
            trial.searcher_metric_value = value
            trial.best_validation_id = row.id
    if exp.state not in TERMINAL:
        event = spb.SearcherEvent(
            validation_completed=spb.ValidationCompleted(
                request_id=trial.request_id, steps_completed=row.steps_completed
            )
        )
        numeric = {k: v for k, v in row.metrics.items() if isinstance(v, (int, float, str, bool))}
        event.validation_completed.metrics.update(numeric)
        searcher_outbox.enqueue(ctx, w, exp.id, event)


def _tells_searcher(exp: models.Experiment, row: models.Metric | None, length: int) -> bool:
    """Whether a validation already gave the searcher this trial's result at `length`."""
    if row is None or _searcher_metric(exp, row.metrics) is None:
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
    if not math.isfinite(value):
        return False
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


def _archive_superseded(w: Work, trial: models.Trial, run_id: int, group: str, steps: int) -> bool:
    result = w.session.execute(
        update(models.Metric)
        .where(
            models.Metric.trial_id == trial.id,
            models.Metric.trial_run_id < run_id,
            models.Metric.group_name == group,
            models.Metric.steps_completed >= steps,
            models.Metric.archived.is_(False),
        )
        .values(archived=True)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def _recompute_summary(w: Work, trial: models.Trial, exp: models.Experiment) -> None:
    """After archiving, rebuild the trial's summary and best validation from what remains."""
    trial.summary_metrics = {}
    trial.searcher_metric_value = None
    trial.best_validation_id = None
    trial.latest_validation_id = None
    smaller = config_view(exp.config).smaller_is_better
    rows = w.session.scalars(
        select(models.Metric)
        .where(models.Metric.trial_id == trial.id, models.Metric.archived.is_(False))
        .order_by(models.Metric.id)
    )
    for row in rows:
        _update_summary(trial, row.group_name, row.metrics)
        if row.group_name == VALIDATION:
            trial.latest_validation_id = row.id
            value = _searcher_metric(exp, row.metrics)
            best: float | None = trial.searcher_metric_value
            if value is not None and (best is None or (value < best if smaller else value > best)):
                trial.searcher_metric_value, trial.best_validation_id = value, row.id


@dataclass(frozen=True)
class ReportResult:
    stored: int
    duplicates: int
    max_stored_seq: int


def report(
    ctx: MasterContext, principal: Principal, trial_id: int, run_id: int, reports: list[Report]
) -> ReportResult:
    """Store reports; says how many were new, how many were resends, and the highest seq stored."""
    for index, item in enumerate(reports):
        _check_report(index, item)
    stored = duplicates = 0
    with ctx.unit_of_work() as w:
        trial = reporting_trial(w, principal, trial_id)
        if run_id != trial.run_id:
            raise FailedPrecondition(
                f"trial {trial_id} is on run {trial.run_id}; reports of run {run_id} are no longer accepted"
            )
        exp = w.session.get_one(models.Experiment, trial.experiment_id)
        seqs = [r.seq for r in reports if r.seq is not None]
        seen: set[int] = set()
        if seqs:
            seen = set(
                w.session.scalars(
                    select(models.Metric.seq).where(
                        models.Metric.trial_id == trial_id,
                        models.Metric.trial_run_id == run_id,
                        models.Metric.seq.in_(seqs),
                    )
                )
            )
        archived_any = False
        for item in reports:
            if item.seq is not None and item.seq in seen:
                duplicates += 1
                continue
            if item.seq is not None:
                seen.add(item.seq)
            metrics = sanitize(item.metrics)
            if item.seq is None:
                merged = _merge_unsequenced(w, trial, run_id, item, metrics)
                if merged:
                    stored += 1
                    continue
            if run_id > 1:
                archived_any |= _archive_superseded(w, trial, run_id, item.group, item.steps_completed)
            row = models.Metric(
                trial_id=trial_id,
                trial_run_id=run_id,
                seq=item.seq,
                group_name=item.group,
                steps_completed=item.steps_completed,
                report_time=item.report_time or utcnow(),
                metrics=metrics,
                batch_metrics=sanitize(item.batch_metrics) if item.batch_metrics else None,
                archived=False,
            )
            w.session.add(row)
            w.session.flush()
            stored += 1
            trial.total_batches = max(trial.total_batches, item.steps_completed)
            _update_summary(trial, item.group, metrics)
            if item.group == VALIDATION:
                _record_validation(ctx, w, trial, exp, row)
        if archived_any:
            _recompute_summary(w, trial, exp)
            trial.total_batches = max(r.steps_completed for r in reports)
        max_seq = w.session.scalar(
            select(func.max(models.Metric.seq)).where(
                models.Metric.trial_id == trial_id, models.Metric.trial_run_id == run_id
            )
        )
        if stored:
            topic = trial_topic(trial_id)
            w.later(lambda: ctx.topics.publish(topic))
    return ReportResult(stored=stored, duplicates=duplicates, max_stored_seq=int(max_seq or 0))


def _merge_unsequenced(
    w: Work, trial: models.Trial, run_id: int, item: Report, metrics: dict[str, Any]
) -> bool:
    """Determined's clients send no sequence number: a report for a step already reported in the
    same run and group is merged into it (a shallow union of keys), as Determined does."""
    existing = w.session.scalar(
        select(models.Metric).where(
            models.Metric.trial_id == trial.id,
            models.Metric.trial_run_id == run_id,
            models.Metric.group_name == item.group,
            models.Metric.steps_completed == item.steps_completed,
            models.Metric.seq.is_(None),
        )
    )
    if existing is None:
        return False
    existing.metrics = {**existing.metrics, **metrics}
    return True


def reporting_trial(w: Work, principal: Principal, trial_id: int) -> models.Trial:
    """The trial a report is for, once the caller may report for it."""
    allocation_access.check_trial(w.session, principal, trial_id)
    trial = w.session.get(models.Trial, trial_id)
    if trial is None:
        raise NotFound(f"trial {trial_id} not found")
    return trial


def check_run_reporter(ctx: MasterContext, principal: Principal, run_id: int) -> None:
    """Determined's harness announces a run (its trial) before reporting: it must be the caller's."""
    with ctx.db.read() as s:
        allocation_access.check_trial(s, principal, run_id, field="run_id")
        if s.get(models.Trial, run_id) is None:
            raise NotFound(f"run {run_id} not found")


# Trial progress reaches the searcher in steps of this size (20 events per trial at most).
PROGRESS_STEP = 0.05


def progress_mark(progress: float) -> int:
    return math.floor(progress / PROGRESS_STEP + 1e-9)


def report_progress(ctx: MasterContext, principal: Principal, trial_id: int, progress: float) -> None:
    if not 0.0 <= progress <= 1.0 or math.isnan(progress):
        raise InvalidArgument("progress: must be between 0 and 1")
    with ctx.unit_of_work() as w:
        trial = reporting_trial(w, principal, trial_id)
        previous = trial.progress
        trial.progress = progress
        exp = w.session.get_one(models.Experiment, trial.experiment_id)
        # The searcher only needs progress that moved visibly (it shows in the experiment's
        # progress): each report would cost a searcher round trip and a snapshot. So it hears when
        # the trial passes a PROGRESS_STEP mark, and at the end.
        if exp.state not in TERMINAL and (
            progress_mark(progress) != progress_mark(previous) or progress == 1.0
        ):
            event = spb.SearcherEvent(
                trial_progress=spb.TrialProgress(request_id=trial.request_id, progress=progress)
            )
            searcher_outbox.enqueue(ctx, w, exp.id, event)


# Determined's harness sets a word or two ("training", "validating"); anything longer is refused.
MAX_RUNNER_STATUS = 256


def report_runner_status(ctx: MasterContext, principal: Principal, trial_id: int, status: str) -> None:
    """What the trial's harness says it is doing (Determined's runner metadata)."""
    if len(status) > MAX_RUNNER_STATUS:
        raise InvalidArgument(f"metadata.state: at most {MAX_RUNNER_STATUS} characters, not {len(status)}")
    with ctx.unit_of_work() as w:
        trial = reporting_trial(w, principal, trial_id)
        trial.runner_status = status


EARLY_EXIT_REASONS = {"INVALID_HP", "INIT_INVALID_HP", "USER_REQUESTED_STOP"}


def report_early_exit(ctx: MasterContext, principal: Principal, trial_id: int, reason: str) -> None:
    if reason not in EARLY_EXIT_REASONS:
        raise InvalidArgument(f"early_exit.reason: must be one of {', '.join(sorted(EARLY_EXIT_REASONS))}")
    with ctx.unit_of_work() as w:
        trial = reporting_trial(w, principal, trial_id)
        if trial.early_exit_reason == reason:
            return  # a retry of a report that was stored (its answer lost): already done
        if trial.early_exit_reason:
            raise FailedPrecondition(
                f"trial {trial_id} already reported an early exit ({trial.early_exit_reason})"
            )
        trial.early_exit_reason = reason
        exp = w.session.get_one(models.Experiment, trial.experiment_id)
        event = spb.SearcherEvent(
            trial_exited_early=spb.TrialExitedEarly(
                request_id=trial.request_id, reason=searcher_outbox.EARLY_EXIT_EVENT_REASONS[reason]
            )
        )
        searcher_outbox.enqueue(ctx, w, exp.id, event)

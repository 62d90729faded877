"""Metrics intake: batched reports stored once each, trial summaries kept current, validations
forwarded to the searcher in the same transaction (so a stored validation always reaches it).

A report from an older run of the trial (a restart resumed from an earlier checkpoint) is refused;
when a new run reports steps that an older run had already passed, the older run's rows past that
point are archived, as Determined does, so curves show what the surviving run did.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from sqlalchemy import and_, func, select, update

from cairn.searcher.v1 import searcher_pb2 as spb
from services.common.logging import get_logger
from services.common.principal import Principal
from services.master.domain.config import config_view
from services.master.domain.identity import allocation_access
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.errors import (
    DomainError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Unavailable,
)
from services.master.domain.kernel.states import TERMINAL
from services.master.domain.kernel.topics import trial_topic
from services.master.domain.metrics import metric_columns
from services.master.domain.trials import searcher_outbox
from services.master.store import metric_rows, models

log = get_logger(__name__)

TRAINING = "training"
VALIDATION = "validation"
# Determined's names for the two built-in groups inside summary_metrics.
SUMMARY_KEYS = {TRAINING: "avg_metrics", VALIDATION: "validation_metrics"}


class Report(NamedTuple):
    # A tuple, not a frozen dataclass: intake makes one per report, thousands per batch, and a
    # frozen dataclass's __init__ costs a microsecond more each.
    group: str
    steps_completed: int
    metrics: dict[str, Any]
    report_time: datetime | None = None
    batch_metrics: list[Any] | None = None
    seq: int | None = None
    # Holds JSON values only (it came as JSON, which has no NaN or infinities): not sanitized again.
    plain: bool = False


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


def _fold_into_summary(summary: dict[str, Any], group: str, metrics: dict[str, Any]) -> None:
    """Adds one report's values to `summary` (a trial's summary_metrics, being rebuilt), in place:
    count, sum, min, max, mean and last of each number, the last of anything else."""
    key = SUMMARY_KEYS.get(group, group)
    section: dict[str, dict[str, Any]] | None = summary.get(key)
    if section is None:
        section = summary[key] = {}
    for name, value in metrics.items():
        entry: dict[str, Any] | None = section.get(name)
        if entry is None:
            entry = section[name] = {}
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            number = float(value)
            count = int(entry.get("count", 0)) + 1
            total = float(entry.get("sum", 0.0)) + number
            entry.update(
                count=count,
                sum=total,
                min=min(float(entry.get("min", number)), number),
                max=max(float(entry.get("max", number)), number),
                mean=total / count,
                last=value,
                type="number",
            )
        else:
            entry.update(last=sanitize(value), type="string" if isinstance(value, str) else "other")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _fold_batch(summary: dict[str, Any], new: list[tuple[Report, dict[str, Any]]]) -> None:
    """What folding each report in turn would give (_fold_into_summary), one metric at a time
    over the whole batch: counts, sums and extremes by builtins, the last value as the last."""
    by_group: dict[str, list[dict[str, Any]]] = {}
    for item, metrics in new:
        by_group.setdefault(item.group, []).append(metrics)
    for group, batch in by_group.items():
        key = SUMMARY_KEYS.get(group, group)
        section: dict[str, dict[str, Any]] = summary.setdefault(key, {})
        names: dict[str, Any] = {}  # every name, in the order they first appear
        for metrics in batch:
            names.update(metrics)
        for name in names:
            values = [metrics[name] for metrics in batch if name in metrics]
            # The common column holds floats only (finite: NaN and infinities were made strings
            # before this); anything else takes the full check.
            numbers = [v for v in values if type(v) is float]
            if len(numbers) != len(values):
                numbers = [float(v) for v in values if _is_number(v)]
            entry: dict[str, Any] = section.setdefault(name, {})
            if numbers:
                metric_columns.add_numbers(entry, numbers)
            last = values[-1]
            if _is_number(last):
                entry.update(last=last, type="number")
            else:
                entry.update(last=sanitize(last), type="string" if isinstance(last, str) else "other")


def _summary_copy(trial: models.Trial) -> dict[str, Any]:
    """A deep enough copy of the trial's summary to fold reports into: the column is replaced, never
    mutated in place, so the ORM sees the change."""
    return {
        key: {name: dict(entry) for name, entry in section.items()} if isinstance(section, dict) else section
        for key, section in (trial.summary_metrics or {}).items()
    }


def _update_summary(trial: models.Trial, group: str, metrics: dict[str, Any]) -> None:
    summary = _summary_copy(trial)
    _fold_into_summary(summary, group, metrics)
    trial.summary_metrics = summary


def _searcher_metric(exp: models.Experiment, metrics: dict[str, Any]) -> float | None:
    name = config_view(exp.config).searcher_metric
    value = metrics.get(name) if name else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _record_validation(
    ctx: MasterContext,
    w: Work,
    trial: models.Trial,
    exp: models.Experiment,
    row_id: int,
    steps_completed: int,
    metrics: dict[str, Any],
) -> None:
    trial.latest_validation_id = row_id
    value = _searcher_metric(exp, metrics)
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
        numeric = {k: v for k, v in metrics.items() if isinstance(v, (int, float, str, bool))}
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


def _first_steps(reports: list[Report]) -> dict[str, int]:
    first_step: dict[str, int] = {}
    for item in reports:
        first_step[item.group] = min(first_step.get(item.group, item.steps_completed), item.steps_completed)
    return first_step


def _archive_superseded(w: Work, trial: models.Trial, run_id: int, first_step: dict[str, int]) -> bool:
    """An earlier run's rows that this run's reports pass again are archived: per group, every row
    at or past the group's first step reported now (`first_step`). One UPDATE per group."""
    archived = False
    for group, steps in first_step.items():
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
        archived |= bool(result.rowcount)  # type: ignore[attr-defined]
    return archived


def _recompute_summary(w: Work, trial: models.Trial, exp: models.Experiment) -> None:
    """After archiving, rebuild the trial's summary and best validation from what remains."""
    summary: dict[str, Any] = {}
    trial.searcher_metric_value = None
    trial.best_validation_id = None
    trial.latest_validation_id = None
    smaller = config_view(exp.config).smaller_is_better
    rows = w.session.execute(
        select(models.Metric.id, models.Metric.group_name, models.Metric.metrics)
        .where(models.Metric.trial_id == trial.id, models.Metric.archived.is_(False))
        .order_by(models.Metric.id)
    )
    for row in rows:
        _fold_into_summary(summary, row.group_name, row.metrics)
        if row.group_name == VALIDATION:
            trial.latest_validation_id = row.id
            value = _searcher_metric(exp, row.metrics)
            best: float | None = trial.searcher_metric_value
            if value is not None and (best is None or (value < best if smaller else value > best)):
                trial.searcher_metric_value, trial.best_validation_id = value, row.id
    trial.summary_metrics = summary


@dataclass(frozen=True)
class ReportResult:
    stored: int
    duplicates: int
    max_stored_seq: int


def report(
    ctx: MasterContext,
    principal: Principal,
    trial_id: int,
    run_id: int,
    batch: list[Report] | metric_columns.FlatBatch,
    after_seq: int = 0,
    progress: float | None = None,
) -> ReportResult:
    """Store reports, then the trial's `progress` when given (the Core API's progress rides on its
    batches); says how many were new, how many were resends, and the highest seq stored.

    Set-based: one query for the sequence numbers already held, one UPDATE per group to archive an
    earlier run's rows, one multi-row INSERT for every new report, and the trial's summary folded
    and written once, whatever the batch's size. (Reports without a sequence number, from
    Determined's clients, come one per call and may merge into a row: they take the row-by-row way.)
    A batch held by column (metric_columns.FlatBatch) is stored from its columns where nothing in
    it was stored before, and as reports otherwise."""
    flat = batch if isinstance(batch, metric_columns.FlatBatch) else None
    if flat is not None and (flat.group == VALIDATION or len(set(flat.seqs)) != len(flat.seqs)):
        # Validations need their rows' ids; a number given twice is stored once, the general way.
        batch = _reports_of_columns(flat)
        flat = None
    if flat is not None:
        metric_columns.check(flat)
        reports: list[Report] = []
    else:
        assert not isinstance(batch, metric_columns.FlatBatch)
        reports = batch
        for index, item in enumerate(reports):
            _check_report(index, item)
    if after_seq < 0:
        raise InvalidArgument("after_seq: must be >= 0")
    if progress is not None:
        check_progress(progress)
    # Outside the unit of work: the batch waited for takes the trial's lock to be stored.
    if after_seq and not ctx.intake_order.wait_turn(
        (trial_id, run_id), after_seq, lambda: _max_stored_seq(ctx, principal, trial_id, run_id)
    ):
        raise _why_not_in_turn(ctx, principal, trial_id, run_id, after_seq)
    now = utcnow()
    lock = _intake_lock(ctx, trial_id, [] if flat is not None else reports, progress)
    tells_searcher = lock is None
    with ctx.unit_of_work(lock) as w:
        trial, exp = _intake_trial(w, principal, trial_id)
        if run_id != trial.run_id:
            raise FailedPrecondition(
                f"trial {trial_id} is on run {trial.run_id}; reports of run {run_id} are no longer accepted"
            )
        seqs = flat.seqs if flat is not None else [r.seq for r in reports if r.seq is not None]
        seen, max_seq = _stored_seqs(w, trial_id, run_id, seqs)
        if progress is not None and not (seqs and seen.issuperset(seqs)):
            # Stored with the reports (the unit of work is all or nothing); not from a batch resent
            # after it was stored (its progress may be older than a later batch's).
            _set_progress(ctx, w, trial, exp, progress, tells_searcher=tells_searcher)
        if flat is not None and not seen:
            stored = _store_columns(ctx, w, trial, exp, run_id, flat)
            w.later(lambda: _count_intake(ctx, stored, _latencies_of_times(flat.times)))
            if max_seq:
                committed = max_seq
                w.later(lambda: ctx.intake_order.stored((trial_id, run_id), committed))
            return ReportResult(stored=stored, duplicates=0, max_stored_seq=max_seq)
        if flat is not None:
            reports = _reports_of_columns(flat)
        stored = duplicates = 0
        fresh: list[tuple[Report, dict[str, Any]]] = []
        unsequenced: list[tuple[Report, dict[str, Any]]] = []
        for item in reports:
            if item.seq is not None:
                if item.seq in seen:
                    duplicates += 1
                    continue
                seen.add(item.seq)
                fresh.append((item, item.metrics if item.plain else sanitize(item.metrics)))
            else:
                unsequenced.append((item, item.metrics if item.plain else sanitize(item.metrics)))
        archived_any = False
        if run_id > 1:
            archived_any = _archive_superseded(
                w, trial, run_id, _first_steps([item for item, _ in fresh + unsequenced])
            )
        summary = _summary_copy(trial)
        if fresh:
            _store_new(ctx, w, trial, exp, run_id, fresh, summary, now)
            stored += len(fresh)
        for item, metrics in unsequenced:
            if _merge_unsequenced(w, trial, run_id, item, metrics):
                stored += 1
                continue
            _store_new(ctx, w, trial, exp, run_id, [(item, metrics)], summary, now)
            stored += 1
        if stored:
            trial.summary_metrics = summary
            steps = [item.steps_completed for item, _ in fresh + unsequenced]
            trial.total_batches = max(trial.total_batches, *steps)
        if archived_any:
            _recompute_summary(w, trial, exp)
            trial.total_batches = max(r.steps_completed for r in reports)
        if stored and any(item.group == VALIDATION for item in reports):
            # A validation may settle the trial's searcher operation, which trial code waits on
            # (signals.py). Training reports change nothing a signal waiter reads: waking every
            # waiter of the trial for each batch cost the master a sixth of its intake work.
            topic = trial_topic(trial_id)
            w.later(lambda: ctx.topics.publish(topic))
        if stored:
            times = [item.report_time for item, _ in fresh + unsequenced if item.report_time is not None]
            w.later(lambda: _count_intake(ctx, stored, _latencies_of(times)))
        if max_seq:
            committed = int(max_seq)
            w.later(lambda: ctx.intake_order.stored((trial_id, run_id), committed))
    return ReportResult(stored=stored, duplicates=duplicates, max_stored_seq=max_seq)


def _intake_trial(w: Work, principal: Principal, trial_id: int) -> tuple[models.Trial, models.Experiment]:
    """The trial a batch is for and its experiment, once the caller may report for it: read in one
    round trip (with trial code's allocation, which the access check then finds in the session).

    The trial's row is held FOR KEY SHARE until the batch commits. Metrics have no foreign key
    (PostgreSQL would check it row by row): this one lock stands for it. Deleting an experiment
    takes its trials FOR UPDATE first, which waits for the batch; a batch that comes after finds no
    trial. KEY SHARE does not block the trial's other updates (state, summary, progress)."""
    query = (
        select(models.Trial, models.Experiment)
        .join(models.Experiment, models.Experiment.id == models.Trial.experiment_id)
        .where(models.Trial.id == trial_id)
        .with_for_update(of=models.Trial, key_share=True)
    )
    if allocation_access.is_trial_code(principal):
        query = query.add_columns(models.Allocation).outerjoin(
            models.Allocation, models.Allocation.id == principal.allocation_id
        )
    found = w.session.execute(query).first()
    allocation_access.check_trial(w.session, principal, trial_id)
    if found is None:
        raise NotFound(f"trial {trial_id} not found")
    return found[0], found[1]


def _stored_seqs(w: Work, trial_id: int, run_id: int, seqs: list[int]) -> tuple[set[int], int]:
    """Of `seqs`, those the run has stored already, and the run's highest number once this batch
    is stored too: one query. By range, not IN: a batch's numbers are (nearly) consecutive, and a
    range over the unique index costs nothing to bind, where thousands of IN parameters cost much."""
    of_run = (models.Metric.trial_id == trial_id, models.Metric.trial_run_id == run_id)
    top = select(func.max(models.Metric.seq).label("top")).where(*of_run).subquery()
    if not seqs:
        return set(), int(w.session.scalar(select(top.c.top)) or 0)
    low, high = min(seqs), max(seqs)
    rows = w.session.execute(
        select(top.c.top, models.Metric.seq)
        .select_from(top)
        .outerjoin(models.Metric, and_(*of_run, models.Metric.seq.between(low, high)))
    ).all()
    return set(seqs).intersection(seq for _, seq in rows), max(int(rows[0][0] or 0), high)


def _why_not_in_turn(
    ctx: MasterContext, principal: Principal, trial_id: int, run_id: int, after_seq: int
) -> DomainError:
    """Why a batch waited in vain for the reports it follows: retryable only while they may still
    come (the trial runs on that run); a batch for a run that is over, or for an ended trial, can
    never be stored. Asked only once the wait is over, so that a batch in turn costs no read."""
    with ctx.db.read() as s:
        allocation_access.check_trial(s, principal, trial_id)
        trial = s.get(models.Trial, trial_id)
        if trial is None:
            return NotFound(f"trial {trial_id} not found")
        if run_id != trial.run_id:
            return FailedPrecondition(
                f"trial {trial_id} is on run {trial.run_id}; reports of run {run_id} are no longer accepted"
            )
        if trial.state in TERMINAL:
            return FailedPrecondition(
                f"after_seq: trial {trial_id} has ended without reports up to seq {after_seq}; "
                "this batch follows them and cannot be stored"
            )
    return Unavailable(
        f"trial {trial_id}: reports up to seq {after_seq} are not stored yet; this batch follows them"
    )


def _max_stored_seq(ctx: MasterContext, principal: Principal, trial_id: int, run_id: int) -> int:
    """The run's highest stored sequence number, once the caller may report for the trial."""
    with ctx.db.read() as s:
        allocation_access.check_trial(s, principal, trial_id)
        found = s.scalar(
            select(func.max(models.Metric.seq)).where(
                models.Metric.trial_id == trial_id, models.Metric.trial_run_id == run_id
            )
        )
    return int(found or 0)


def _progress_is_news(experiment_state: str, previous: float, progress: float) -> bool:
    """Whether the searcher hears of the trial's progress going from `previous` to `progress`."""
    return experiment_state not in TERMINAL and (
        progress_mark(progress) != progress_mark(previous) or progress == 1.0
    )


def _intake_lock(
    ctx: MasterContext, trial_id: int, reports: list[Report], progress: float | None = None
) -> threading.Lock | None:
    """The lock a batch is stored under; None: the process-wide one, as every state change.

    On PostgreSQL, a batch without validations takes only its trial's lock, so that intake for
    different trials (and the rest of the master) runs side by side. That is safe because such a
    batch writes nothing but the trial's metric rows and the columns only intake writes (the
    summary, total_batches) and sends nothing: other units updating the trial's other columns meet
    it in PostgreSQL's row lock, not in a lost update. A validation tells the searcher (an outbox
    event, ordered against the trial's exit), and so does progress that passes a mark (read before
    the lock is chosen: progress that passed one in a race with another writer is stored without the
    event, and the searcher hears of it at the next mark); SQLite has a single writer anyway: those
    keep the process-wide lock."""
    if ctx.db.dialect != "postgresql" or any(r.group == VALIDATION for r in reports):
        return None
    if progress is not None and _progress_tells_searcher(ctx, trial_id, progress):
        return None
    return ctx.trial_locks.of(trial_id)


def _progress_tells_searcher(ctx: MasterContext, trial_id: int, progress: float) -> bool:
    with ctx.db.read() as s:
        found = s.execute(
            select(models.Trial.progress, models.Experiment.state)
            .join(models.Experiment, models.Experiment.id == models.Trial.experiment_id)
            .where(models.Trial.id == trial_id)
        ).first()
    if found is None:
        return False  # the unit of work says it is not there
    previous, state = found
    return _progress_is_news(state, previous, progress)


def _store_new(
    ctx: MasterContext,
    w: Work,
    trial: models.Trial,
    exp: models.Experiment,
    run_id: int,
    new: list[tuple[Report, dict[str, Any]]],
    summary: dict[str, Any],
    now: datetime,
) -> None:
    """Insert `new` reports in one statement, fold them into `summary`, and record validations
    (which need their rows' ids: only then are the ids returned)."""
    rows: list[metric_rows.Row] = [
        (
            trial.id,
            run_id,
            item.seq,
            item.group,
            item.steps_completed,
            item.report_time or now,
            metric_rows.json_text(metrics),
            metric_rows.json_text(_plain_batches(item)) if item.batch_metrics else None,
            False,
        )
        for item, metrics in new
    ]
    validations = [i for i, (item, _) in enumerate(new) if item.group == VALIDATION]
    _inserting(ctx, w)
    if validations:
        ids = metric_rows.insert_returning_ids(w.session, rows)
    else:
        metric_rows.insert(w.session, rows)
        ids = []
    _fold_batch(summary, new)
    for index in validations:
        item, metrics = new[index]
        _record_validation(ctx, w, trial, exp, ids[index], item.steps_completed, metrics)


def _inserting(ctx: MasterContext, w: Work) -> None:
    """Metric rows are about to take their ids in `w`: counted as on their way until its
    transaction is over (metric_inserts.py)."""
    token = ctx.metric_inserts.begin()
    w.finally_(lambda: ctx.metric_inserts.end(token))


def _plain_batches(item: Report) -> Any:
    return item.batch_metrics if item.plain else sanitize(item.batch_metrics)


def _count_intake(ctx: MasterContext, stored: int, latencies: list[float]) -> None:
    """Telemetry, after the commit: rows in, and how long each report took to become readable."""
    telemetry = ctx.telemetry
    telemetry.metric_rows.add(stored)
    telemetry.metric_batches.add()
    telemetry.metric_intake_latency.observe_many(latencies)


def _latencies_of(report_times: list[datetime]) -> list[float]:
    now = utcnow()
    return [max(0.0, (now - at).total_seconds()) for at in report_times]


def _latencies_of_times(times: list[float]) -> list[float]:
    now = utcnow().timestamp()
    return [max(0.0, now - at) for at in times]


def _store_columns(
    ctx: MasterContext,
    w: Work,
    trial: models.Trial,
    exp: models.Experiment,
    run_id: int,
    flat: metric_columns.FlatBatch,
) -> int:
    """A batch by column, none of it stored before: an earlier run's rows it passes archived, one
    COPY, the summary folded from the columns. (No validation: those go as reports.)"""
    archived = run_id > 1 and _archive_superseded(w, trial, run_id, {flat.group: min(flat.steps)})
    _inserting(ctx, w)
    metric_rows.insert_columns(w.session, trial.id, run_id, flat)
    if archived:
        _recompute_summary(w, trial, exp)
        trial.total_batches = max(flat.steps)
        return len(flat.seqs)
    summary = _summary_copy(trial)
    key = SUMMARY_KEYS.get(flat.group, flat.group)
    metric_columns.fold(summary.setdefault(key, {}), flat)
    trial.summary_metrics = summary
    trial.total_batches = max(trial.total_batches, *flat.steps)
    return len(flat.seqs)


def _reports_of_columns(flat: metric_columns.FlatBatch) -> list[Report]:
    return [
        Report(flat.group, steps, values, datetime.fromtimestamp(at, UTC), None, seq, True)
        for seq, steps, at, values in zip(flat.seqs, flat.steps, flat.times, flat.values, strict=True)
    ]


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


def check_progress(progress: float) -> None:
    if not 0.0 <= progress <= 1.0 or math.isnan(progress):
        raise InvalidArgument("progress: must be between 0 and 1")


def report_progress(ctx: MasterContext, principal: Principal, trial_id: int, progress: float) -> None:
    check_progress(progress)
    with ctx.unit_of_work() as w:
        trial = reporting_trial(w, principal, trial_id)
        exp = w.session.get_one(models.Experiment, trial.experiment_id)
        _set_progress(ctx, w, trial, exp, progress)


def _set_progress(
    ctx: MasterContext,
    w: Work,
    trial: models.Trial,
    exp: models.Experiment,
    progress: float,
    *,
    tells_searcher: bool = True,
) -> None:
    """The trial's progress (checked) is `progress`, in the caller's unit of work. The searcher may
    be told (an outbox event) only under the process-wide lock (`tells_searcher`)."""
    previous = trial.progress
    trial.progress = progress
    # The searcher only needs progress that moved visibly (it shows in the experiment's
    # progress): each report would cost a searcher round trip and a snapshot. So it hears when
    # the trial passes a PROGRESS_STEP mark, and at the end.
    if tells_searcher and _progress_is_news(exp.state, previous, progress):
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

"""Metrics intake: batched reports stored once each, the trial's summary kept current
(summaries.py), validations told to the searcher in the same transaction (validations.py), and the
progress that rides on a batch stored with it (progress.py).

A report from an older run of the trial (a restart resumed from an earlier checkpoint) is refused;
when a new run reports steps that an older run had already passed, the older run's rows past that
point are archived, as Determined does, so curves show what the surviving run did.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import and_, bindparam, func, select, update

from services.common.principal import Principal
from services.master.domain.identity import access, allocation_access
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.errors import (
    Aborted,
    DomainError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
)
from services.master.domain.kernel.states import TERMINAL
from services.master.domain.kernel.topics import trial_topic
from services.master.domain.metrics import metric_columns
from services.master.domain.metrics.progress import check_progress, progress_tells_searcher, set_progress
from services.master.domain.metrics.reports import SUMMARY_KEYS, VALIDATION, Report, check_report, sanitize
from services.master.domain.metrics.summaries import fold_batch, recompute_summary, summary_copy
from services.master.domain.metrics.system_metrics import PROFILER_GROUPS
from services.master.domain.metrics.validations import record_validation
from services.master.store import metric_rows, models


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
    flat, reports = _checked_batch(batch)
    if after_seq < 0:
        raise InvalidArgument("after_seq: must be >= 0")
    if progress is not None:
        check_progress(progress)
    _wait_for_turn(ctx, principal, trial_id, run_id, after_seq)
    now = utcnow()
    lock = _intake_lock(ctx, trial_id, [] if flat is not None else reports, progress)
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
            set_progress(ctx, w, trial, exp, progress, tells_searcher=lock is None)
        if flat is not None and not seen:
            columns = flat
            stored, duplicates = _store_columns(ctx, w, trial, exp, run_id, columns), 0
            w.later(lambda: _count_intake(ctx, stored, _latencies_of_times(columns.times)))
        else:
            if flat is not None:
                reports = _reports_of_columns(flat)
            stored, duplicates = _store_reports(ctx, w, trial, exp, run_id, reports, seen, now)
        if max_seq:
            committed = int(max_seq)
            w.later(lambda: ctx.intake_order.stored((trial_id, run_id), committed))
    return ReportResult(stored=stored, duplicates=duplicates, max_stored_seq=max_seq)


def _checked_batch(
    batch: list[Report] | metric_columns.FlatBatch,
) -> tuple[metric_columns.FlatBatch | None, list[Report]]:
    """The batch checked: by column where it can be stored so, else as reports."""
    if isinstance(batch, metric_columns.FlatBatch):
        if batch.group != VALIDATION and len(set(batch.seqs)) == len(batch.seqs):
            metric_columns.check(batch)
            return batch, []
        # Validations need their rows' ids; a number given twice is stored once, the general way.
        batch = _reports_of_columns(batch)
    for index, item in enumerate(batch):
        check_report(index, item)
    return None, batch


def _wait_for_turn(
    ctx: MasterContext, principal: Principal, trial_id: int, run_id: int, after_seq: int
) -> None:
    """A batch that follows others (`after_seq`) waits until they are stored, outside the unit of
    work (the batch waited for takes the trial's lock to be stored); why not, when it waits in vain."""
    if after_seq and not ctx.intake_order.wait_turn(
        (trial_id, run_id), after_seq, lambda: _max_stored_seq(ctx, principal, trial_id, run_id)
    ):
        raise _why_not_in_turn(ctx, principal, trial_id, run_id, after_seq)


def _store_reports(
    ctx: MasterContext,
    w: Work,
    trial: models.Trial,
    exp: models.Experiment,
    run_id: int,
    reports: list[Report],
    seen: set[int],
    now: datetime,
) -> tuple[int, int]:
    """The reports not stored before (`seen`: the run's numbers already held), stored and folded
    into the trial's summary; (stored, duplicates)."""
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
    summary = summary_copy(trial)
    if fresh:
        _store_new(ctx, w, trial, exp, run_id, fresh, summary, now)
        stored += len(fresh)
    for item, metrics in unsequenced:
        # Determined's profiler reports every sample at no step (stored at 0): each is a reading of
        # its own, not a step's figures to merge.
        if item.group not in PROFILER_GROUPS and _merge_unsequenced(w, trial, run_id, item, metrics):
            stored += 1
            continue
        _store_new(ctx, w, trial, exp, run_id, [(item, metrics)], summary, now)
        stored += 1
    if stored:
        trial.summary_metrics = summary
        steps = [item.steps_completed for item, _ in fresh + unsequenced]
        trial.total_batches = max(trial.total_batches, *steps)
    if archived_any:
        recompute_summary(w, trial, exp)
        trial.total_batches = max(r.steps_completed for r in reports)
    if stored and any(item.group == VALIDATION for item in reports):
        # A validation may settle the trial's searcher operation, which trial code waits on
        # (signals.py). Training reports change nothing a signal waiter reads: waking every
        # waiter of the trial for each batch cost the master a sixth of its intake work.
        topic = trial_topic(trial.id)
        w.later(lambda: ctx.topics.publish(topic))
    if stored:
        times = [item.report_time for item, _ in fresh + unsequenced if item.report_time is not None]
        w.later(lambda: _count_intake(ctx, stored, _latencies_of(times)))
    return stored, duplicates


# The statements of a report's reads, built once with their values as parameters: a report's own
# work is small, and building and keying a statement anew for each was a quarter of it
# (bench.trial_phases).
_INTAKE = (
    select(models.Trial, models.Experiment)
    .join(models.Experiment, models.Experiment.id == models.Trial.experiment_id)
    .where(models.Trial.id == bindparam("trial_id"))
    .with_for_update(of=models.Trial, key_share=True)
)
_INTAKE_FOR_TRIAL_CODE = _INTAKE.add_columns(models.Allocation).outerjoin(
    models.Allocation, models.Allocation.id == bindparam("allocation_id")
)
_OF_RUN = (
    models.Metric.trial_id == bindparam("trial_id"),
    models.Metric.trial_run_id == bindparam("run_id"),
)
_RUN_TOP = select(func.max(models.Metric.seq).label("top")).where(*_OF_RUN).subquery()
_HIGHEST_SEQ = select(_RUN_TOP.c.top)
_STORED_IN_RANGE = (
    select(_RUN_TOP.c.top, models.Metric.seq)
    .select_from(_RUN_TOP)
    .outerjoin(models.Metric, and_(*_OF_RUN, models.Metric.seq.between(bindparam("low"), bindparam("high"))))
)


def _intake_trial(w: Work, principal: Principal, trial_id: int) -> tuple[models.Trial, models.Experiment]:
    """The trial a batch is for and its experiment, once the caller may report for it: read in one
    round trip (with trial code's allocation, which the access check then finds in the session).

    The trial's row is held FOR KEY SHARE until the batch commits. Metrics have no foreign key
    (PostgreSQL would check it row by row): this one lock stands for it. Deleting an experiment
    takes its trials FOR UPDATE first, which waits for the batch; a batch that comes after finds no
    trial. KEY SHARE does not block the trial's other updates (state, summary, progress)."""
    if allocation_access.is_trial_code(principal):
        found = w.session.execute(
            _INTAKE_FOR_TRIAL_CODE, {"trial_id": trial_id, "allocation_id": principal.allocation_id}
        ).first()
    else:
        found = w.session.execute(_INTAKE, {"trial_id": trial_id}).first()
    # A user's session reports too (an unmanaged run's code): only into what they may change.
    access.check_trial(w.session, principal, trial_id, Permission.UPDATE_EXPERIMENT)
    if found is None:
        raise NotFound(f"trial {trial_id} not found")
    return found[0], found[1]


def _stored_seqs(w: Work, trial_id: int, run_id: int, seqs: list[int]) -> tuple[set[int], int]:
    """Of `seqs`, those the run has stored already, and the run's highest number once this batch
    is stored too: one query. By range, not IN: a batch's numbers are (nearly) consecutive, and a
    range over the unique index costs nothing to bind, where thousands of IN parameters cost much."""
    of_run = {"trial_id": trial_id, "run_id": run_id}
    if not seqs:
        return set(), int(w.session.scalar(_HIGHEST_SEQ, of_run) or 0)
    low, high = min(seqs), max(seqs)
    rows = w.session.execute(_STORED_IN_RANGE, {**of_run, "low": low, "high": high}).all()
    return set(seqs).intersection(seq for _, seq in rows), max(int(rows[0][0] or 0), high)


def _why_not_in_turn(
    ctx: MasterContext, principal: Principal, trial_id: int, run_id: int, after_seq: int
) -> DomainError:
    """Why a batch waited in vain for the reports it follows: retryable (ABORTED) only while they
    may still come (the trial runs on that run); a batch for a run that is over, or for an ended
    trial, can never be stored. Asked only once the wait is over, so that a batch in turn costs no read."""
    with ctx.db.read() as s:
        access.check_trial(s, principal, trial_id, Permission.UPDATE_EXPERIMENT)
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
    # Not the master's failure: the batch's place in its run's sequence is not reached (a conflict,
    # gRPC's ABORTED, HTTP 409), which the Core API retries.
    return Aborted(
        f"trial {trial_id}: reports up to seq {after_seq} are not stored yet; this batch follows them"
    )


def _max_stored_seq(ctx: MasterContext, principal: Principal, trial_id: int, run_id: int) -> int:
    """The run's highest stored sequence number, once the caller may report for the trial."""
    with ctx.db.read() as s:
        access.check_trial(s, principal, trial_id, Permission.UPDATE_EXPERIMENT)
        found = s.scalar(
            select(func.max(models.Metric.seq)).where(
                models.Metric.trial_id == trial_id, models.Metric.trial_run_id == run_id
            )
        )
    return int(found or 0)


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
    if progress is not None and progress_tells_searcher(ctx, trial_id, progress):
        return None
    return ctx.trial_locks.of(trial_id)


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
    fold_batch(summary, new)
    for index in validations:
        item, metrics = new[index]
        record_validation(ctx, w, trial, exp, ids[index], item.steps_completed, metrics)


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
        recompute_summary(w, trial, exp)
        trial.total_batches = max(flat.steps)
        return len(flat.seqs)
    summary = summary_copy(trial)
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


# A step's row without a sequence number (Determined's clients send each report alone): built once.
_UNSEQUENCED_AT = select(models.Metric).where(
    *_OF_RUN,
    models.Metric.group_name == bindparam("group"),
    models.Metric.steps_completed == bindparam("steps"),
    models.Metric.seq.is_(None),
)


def _merge_unsequenced(
    w: Work, trial: models.Trial, run_id: int, item: Report, metrics: dict[str, Any]
) -> bool:
    """Determined's clients send no sequence number: a report for a step already reported in the
    same run and group is merged into it (a shallow union of keys), as Determined does."""
    existing = w.session.scalar(
        _UNSEQUENCED_AT,
        {"trial_id": trial.id, "run_id": run_id, "group": item.group, "steps": item.steps_completed},
    )
    if existing is None:
        return False
    existing.metrics = {**existing.metrics, **metrics}
    return True

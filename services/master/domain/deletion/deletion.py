"""Deleting an experiment: its checkpoints' files first, then every row that belongs to it.

Owed in the transaction that marks the experiment DELETING (experiments.transition) and run by the
deferred-work loop until it succeeds, so the API answers at once and a master that stops midway
finishes the job later. If deleting files fails, the experiment shows DELETE_FAILED (with the
reason in the master's log) and keeps its rows, so nothing points to files that are gone and no
files are left without a row that names them; the loop tries again with backoff.
"""

from __future__ import annotations

from sqlalchemy import delete, select

from services.common.logging import get_logger
from services.master.domain.experiments import experiments
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.states import RunState
from services.master.store import models

log = get_logger(__name__)

_UNDER_DELETION = frozenset({RunState.DELETING, RunState.DELETE_FAILED})


def delete_now(ctx: MasterContext, experiment_id: int) -> None:
    """Idempotent: an experiment already gone is done. Raises if its files could not be deleted."""
    with ctx.db.read() as s:
        exp = s.get(models.Experiment, experiment_id)
        if exp is None or exp.state not in _UNDER_DELETION:
            return
    try:
        for delete_files in ctx.experiment_delete_hooks:
            delete_files(experiment_id)
    except Exception as exc:
        log.error("deleting checkpoint files failed", experiment_id=experiment_id, error=str(exc))
        with ctx.unit_of_work() as w:
            row = w.session.get(models.Experiment, experiment_id)
            if row is not None and row.state == RunState.DELETING:
                experiments.transition(
                    ctx, w, row, RunState.DELETE_FAILED, f"deleting its files failed: {exc}"
                )
        raise
    with ctx.unit_of_work() as w:
        # Locked first (FOR UPDATE waits for a metric batch still holding a trial, FOR KEY SHARE):
        # metrics have no foreign key, so this is what keeps a late batch's rows from outliving
        # their trial. A batch arriving after the lock finds no trial once this commits.
        trial_ids = list(
            w.session.scalars(
                select(models.Trial.id)
                .where(models.Trial.experiment_id == experiment_id)
                .order_by(models.Trial.id)
                .with_for_update()
            )
        )
        if trial_ids:
            w.session.execute(delete(models.TaskLog).where(models.TaskLog.trial_id.in_(trial_ids)))
            w.session.execute(
                delete(models.TaskSystemMetric).where(models.TaskSystemMetric.trial_id.in_(trial_ids))
            )
        # The rest goes with the experiment row (ON DELETE CASCADE; metrics have none), in order for
        # SQLite's sake.
        for trial_id in trial_ids:
            w.session.execute(delete(models.Checkpoint).where(models.Checkpoint.trial_id == trial_id))
            w.session.execute(delete(models.Metric).where(models.Metric.trial_id == trial_id))
            allocation_ids = select(models.Allocation.id).where(models.Allocation.trial_id == trial_id)
            w.session.execute(
                delete(models.Container).where(models.Container.allocation_id.in_(allocation_ids))
            )
            w.session.execute(delete(models.Allocation).where(models.Allocation.trial_id == trial_id))
        w.session.execute(delete(models.Trial).where(models.Trial.experiment_id == experiment_id))
        for table in (
            models.SearcherEvent,
            models.SearcherSnapshot,
            models.SearcherReplay,
            models.ModelDefinition,
        ):
            w.session.execute(delete(table).where(table.experiment_id == experiment_id))
        w.session.execute(delete(models.Experiment).where(models.Experiment.id == experiment_id))
    log.info("experiment deleted", experiment_id=experiment_id)

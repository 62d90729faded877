"""Deleting an experiment: its checkpoints' files first, then every row that belongs to it.

Runs in the background (the API answers once the experiment is DELETING). If deleting files fails
the experiment goes to DELETE_FAILED and keeps its rows, so nothing points to files that are gone
and no files are left without a row that names them.
"""

from __future__ import annotations

import threading

from sqlalchemy import delete, select

from services.common.logging import get_logger
from services.master.domain import experiments
from services.master.domain.context import MasterContext
from services.master.domain.states import RunState
from services.master.store import models

log = get_logger(__name__)


def delete_now(ctx: MasterContext, experiment_id: int) -> None:
    try:
        for delete_files in ctx.experiment_delete_hooks:
            delete_files(experiment_id)
    except Exception as exc:
        log.error("deleting checkpoint files failed", experiment_id=experiment_id, error=str(exc))
        with ctx.unit_of_work() as w:
            exp = w.session.get(models.Experiment, experiment_id)
            if exp is not None:
                experiments.transition(
                    ctx, w, exp, RunState.DELETE_FAILED, f"deleting its files failed: {exc}"
                )
        return
    with ctx.unit_of_work() as w:
        trial_ids = list(
            w.session.scalars(select(models.Trial.id).where(models.Trial.experiment_id == experiment_id))
        )
        if trial_ids:
            w.session.execute(delete(models.TaskLog).where(models.TaskLog.trial_id.in_(trial_ids)))
        # The rest goes with the experiment row (ON DELETE CASCADE), in order for SQLite's sake.
        for trial_id in trial_ids:
            w.session.execute(delete(models.Checkpoint).where(models.Checkpoint.trial_id == trial_id))
            w.session.execute(delete(models.Metric).where(models.Metric.trial_id == trial_id))
            allocation_ids = select(models.Allocation.id).where(models.Allocation.trial_id == trial_id)
            w.session.execute(
                delete(models.Container).where(models.Container.allocation_id.in_(allocation_ids))
            )
            w.session.execute(delete(models.Allocation).where(models.Allocation.trial_id == trial_id))
        w.session.execute(delete(models.Trial).where(models.Trial.experiment_id == experiment_id))
        for table in (models.SearcherEvent, models.SearcherSnapshot, models.ModelDefinition):
            w.session.execute(delete(table).where(table.experiment_id == experiment_id))
        w.session.execute(delete(models.Experiment).where(models.Experiment.id == experiment_id))
    log.info("experiment deleted", experiment_id=experiment_id)


def delete_in_background(ctx: MasterContext, experiment_id: int) -> None:
    threading.Thread(
        target=delete_now, args=(ctx, experiment_id), name=f"delete-exp-{experiment_id}", daemon=True
    ).start()


def resume_pending_deletions(ctx: MasterContext) -> None:
    """A master that stopped mid-deletion finishes the job at boot."""
    with ctx.db.read() as s:
        pending = list(
            s.scalars(select(models.Experiment.id).where(models.Experiment.state == RunState.DELETING))
        )
    for experiment_id in pending:
        delete_in_background(ctx, experiment_id)

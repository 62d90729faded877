"""Metric rows never outlive their trial, though the metrics table has no foreign key to trials
(PostgreSQL checked it once per inserted row): a batch holds its trial's row FOR KEY SHARE while it
writes, and deleting an experiment takes its trials FOR UPDATE before it deletes their metrics."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import func, select

from services.master.domain.deletion import deletion
from services.master.domain.experiments import experiments
from services.master.domain.kernel.errors import NotFound
from services.master.domain.metrics import intake
from services.master.store import metric_rows, models
from tests.unit.master.domain.harness import Master
from tests.unit.master.domain.test_domain_models import Trial

# On each database: row locks (FOR KEY SHARE, FOR UPDATE) that PostgreSQL takes and SQLite has not.
pytestmark = pytest.mark.on_each_database


def _metric_rows(master: Master, trial_id: int) -> int:
    with master.db.read() as s:
        return int(s.scalar(select(func.count()).where(models.Metric.trial_id == trial_id)) or 0)


def _mark_deleting(master: Master, experiment_id: int) -> None:
    with master.ctx.unit_of_work() as w:
        experiments.mark_deleting(master.ctx, w, experiments.load(w, experiment_id))


def test_deleting_an_experiment_takes_its_metrics_and_later_batches_find_no_trial(
    master: Master, tmp_path: Path
) -> None:
    trial = Trial(master, tmp_path / "storage")
    for step in (1, 2, 3):
        master.report(trial.trial_id, 1, "training", step, step + 1, loss=1.0 / step)
    trial.complete()
    assert _metric_rows(master, trial.trial_id) == 4
    _mark_deleting(master, trial.experiment_id)
    deletion.delete_now(master.ctx, trial.experiment_id)

    assert _metric_rows(master, trial.trial_id) == 0
    with pytest.raises(NotFound, match=f"trial {trial.trial_id} not found"):
        master.report(trial.trial_id, 1, "training", 4, 9, loss=0.1)
    assert _metric_rows(master, trial.trial_id) == 0


def test_a_batch_being_stored_holds_off_the_deletion_of_its_trial(master: Master, tmp_path: Path) -> None:
    """The race the foreign key used to close: rows a batch is still writing when the deletion
    starts are deleted with the trial, not left behind."""
    if master.db.dialect != "postgresql":
        pytest.skip("SQLite has one writer: a batch and a deletion never overlap")
    trial = Trial(master, tmp_path / "storage")
    trial.complete()
    _mark_deleting(master, trial.experiment_id)

    holding, release = threading.Event(), threading.Event()

    def late_batch() -> None:
        # intake.report's own steps, paused between reading the trial and committing its rows.
        with master.ctx.unit_of_work(master.ctx.trial_locks.of(trial.trial_id)) as w:
            intake._intake_trial(w, master.admin, trial.trial_id)
            row: metric_rows.Row = (
                trial.trial_id, 1, 99, "training", 99, datetime.now(UTC), '{"loss": 0.1}', None, False
            )  # fmt: skip
            metric_rows.insert(w.session, [row])
            holding.set()
            assert release.wait(10)

    batch = threading.Thread(target=late_batch)
    batch.start()
    assert holding.wait(10)
    deleting = threading.Thread(target=deletion.delete_now, args=(master.ctx, trial.experiment_id))
    deleting.start()
    time.sleep(0.5)
    assert deleting.is_alive(), "the deletion went ahead while a batch held the trial"
    release.set()
    batch.join(10)
    deleting.join(10)
    assert not deleting.is_alive()

    with master.db.read() as s:
        assert s.get(models.Experiment, trial.experiment_id) is None
    assert _metric_rows(master, trial.trial_id) == 0

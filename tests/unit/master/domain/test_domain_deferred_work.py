"""Work the master owes (checkpoint GC, deletions) is written with the change that owes it, retried
with capped backoff while the checkpoint service is down, done exactly once when it answers, and
still owed after a master restart (the checkpoint service's own code in process, real files)."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import select, update

from services.master.domain.experiments import experiments
from services.master.domain.kernel import deferred_work
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.deferred_work import Backoff
from services.master.gateway import prometheus
from services.master.store import models
from services.master.store.db import MIGRATIONS_DIR, Database
from tests.unit.master.domain.harness import Master
from tests.unit.master.domain.test_domain_models import Trial

# On each database: owed work is rows written with the change that owes them; deletion, restart, upgrade.
pytestmark = pytest.mark.on_each_database


def _owed(master: Master) -> list[models.DeferredWork]:
    with master.db.read() as s:
        return list(s.scalars(select(models.DeferredWork).order_by(models.DeferredWork.id)))


def _time_passes(master: Master) -> None:
    """Whatever waits for its retry is due now."""
    with master.db.transaction() as s:
        s.execute(update(models.DeferredWork).values(due_at=utcnow() - timedelta(seconds=1)))


def _waits_s(item: models.DeferredWork) -> float:
    return (item.due_at - utcnow()).total_seconds()


@pytest.fixture
def trial(master: Master, tmp_path: Path) -> Trial:
    return Trial(master, tmp_path / "storage")


def test_gc_is_owed_at_the_end_retried_with_backoff_and_done_once(master: Master, trial: Trial) -> None:
    at_2, at_4, at_6 = trial.checkpoint(2), trial.checkpoint(4), trial.checkpoint(6)
    assert _owed(master) == []  # nothing owed while it runs
    master.checkpoints.down = True
    trial.complete()

    # The end and the GC it owes were committed together.
    (item,) = _owed(master)
    assert (item.kind, item.subject_id, item.attempts) == ("checkpoint_gc", trial.experiment_id, 0)

    # The service is down: each failure is recorded and waits longer (1 s, then 2 s, halved at worst).
    for attempt, longest in ((1, 1.0), (2, 2.0), (3, 4.0)):
        assert master.run_deferred() == 1
        (item,) = _owed(master)
        assert item.attempts == attempt and "unavailable" in item.last_error
        assert longest / 2 - 0.5 <= _waits_s(item) <= longest
        assert (item.claimed_by, item.claimed_until) == ("", None)
        assert master.run_deferred() == 0  # not due again yet
        _time_passes(master)
    assert all(trial.kept(ck) for ck in (at_2, at_4, at_6))
    assert not master.experiment(trial.experiment_id).checkpoint_gc_done
    scraped = prometheus.render(master.ctx)  # what /metrics shows meanwhile
    assert 'cairn_deferred_work{kind="checkpoint_gc"} 1' in scraped
    assert 'cairn_deferred_work_failing{kind="checkpoint_gc"} 1' in scraped

    # It answers: collected by the policy (the trial's latest kept), once, and no longer owed.
    master.checkpoints.down = False
    assert master.run_deferred() == 1
    assert [trial.kept(ck) for ck in (at_2, at_4, at_6)] == [False, False, True]
    assert master.experiment(trial.experiment_id).checkpoint_gc_done
    assert _owed(master) == [] and master.run_deferred() == 0
    assert master.checkpoints.answered == {"collect_garbage": 1}
    assert "cairn_deferred_work{" not in prometheus.render(master.ctx)

    # Owed again by mistake (or run twice by two masters): done without asking the service again.
    with master.ctx.unit_of_work() as w:
        deferred_work.owe(w, deferred_work.CHECKPOINT_GC, trial.experiment_id)
    assert master.run_deferred() == 1 and _owed(master) == []
    assert master.checkpoints.answered == {"collect_garbage": 1}


def test_backoff_is_capped_and_jittered() -> None:
    backoff = Backoff(first_s=1.0, cap_s=60.0)
    delays = [backoff.delay(50) for _ in range(200)]
    assert all(30.0 <= d <= 60.0 for d in delays) and len(set(delays)) > 1


def test_deletion_is_retried_while_the_checkpoint_service_fails(master: Master, trial: Trial) -> None:
    ck = trial.checkpoint(2)
    trial.complete()
    assert master.run_deferred() == 1  # its GC (keeps the only checkpoint)
    master.checkpoints.down = True
    with master.ctx.unit_of_work() as w:
        experiments.mark_deleting(master.ctx, w, experiments.load(w, trial.experiment_id))
    (item,) = _owed(master)
    assert (item.kind, item.subject_id) == ("delete_experiment", trial.experiment_id)

    # Files first: they could not go, so nothing goes, and the user sees why.
    assert master.run_deferred() == 1
    assert master.experiment(trial.experiment_id).state == "DELETE_FAILED"
    assert trial.kept(ck)
    (item,) = _owed(master)
    assert item.attempts == 1 and "unavailable" in item.last_error
    _time_passes(master)
    assert master.run_deferred() == 1
    assert _owed(master)[0].attempts == 2

    master.checkpoints.down = False
    _time_passes(master)
    assert master.run_deferred() == 1
    assert _owed(master) == []
    with master.db.read() as s:
        assert s.get(models.Experiment, trial.experiment_id) is None
        assert s.get(models.Checkpoint, ck) is None
    assert not trial.files.exists(ck)


def test_owed_work_survives_a_master_restart(
    master: Master, trial: Trial, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trial.checkpoint(2)
    at_4 = trial.checkpoint(4)
    trial.complete()
    # The master stops after the commit that owed the GC, before running it.
    master.close()
    restarted = master.restarted()
    try:
        assert restarted.run_deferred() == 1
        assert restarted.experiment(trial.experiment_id).checkpoint_gc_done
        assert restarted.checkpoints.answered == {"collect_garbage": 1}
        assert trial.files.exists(at_4)

        # A master that died while running an item holds it only until its claim lapses.
        monkeypatch.setattr(deferred_work, "LEASE_S", 0.3)
        with restarted.ctx.unit_of_work() as w:
            deferred_work.owe(w, deferred_work.CHECKPOINT_GC, trial.experiment_id)
        assert deferred_work.claim_next(restarted.ctx, "a master that dies now") is not None
        assert restarted.run_deferred() == 0
        time.sleep(0.4)
        assert restarted.run_deferred() == 1 and _owed(restarted) == []
    finally:
        restarted.close()


def test_work_owed_again_while_it_runs_runs_again(master: Master) -> None:
    with master.ctx.unit_of_work() as w:
        deferred_work.owe(w, deferred_work.CHECKPOINT_GC, 7)
    item = deferred_work.claim_next(master.ctx, "me")
    assert item is not None and deferred_work.claim_next(master.ctx, "another master") is None
    with master.ctx.unit_of_work() as w:  # e.g. a new GC policy while the old one is applied
        deferred_work.owe(w, deferred_work.CHECKPOINT_GC, 7)
    deferred_work.complete(master.ctx, item, "me")
    (left,) = _owed(master)
    assert (left.revision, left.claimed_by, left.claimed_until) == (2, "", None)
    assert deferred_work.claim_next(master.ctx, "another master") is not None


def test_an_older_masters_unfinished_work_is_owed_after_the_upgrade(tmp_path: Path) -> None:
    """What a master before 0007 left for its next start (an ended experiment not collected, a
    deletion under way) is in the outbox once the database is migrated."""
    url = f"sqlite:///{tmp_path / 'old.db'}"
    db = Database(url)
    with db.engine.begin() as connection:
        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, "0006")
        connection.exec_driver_sql(
            "INSERT INTO users (id, username, password_hash, admin, active, display_name, created_at, "
            "modified_at) VALUES (1, 'u', 'x', 0, 1, '', '2026-01-01', '2026-01-01')"
        )
        for experiment_id, state, gc_done in ((7, "COMPLETED", 0), (8, "COMPLETED", 1), (9, "DELETING", 1)):
            connection.exec_driver_sql(
                "INSERT INTO experiments (id, name, description, labels, state, archived, config, "
                "original_config, owner_id, start_time, progress, resource_pool, searcher_session_id, "
                "model_definition_size, notes, checkpoint_gc_done) VALUES "
                f"({experiment_id}, 'e', '', '[]', '{state}', 0, '{{}}', '', 1, '2026-01-01', 1.0, "
                f"'default', 's', 0, '', {gc_done})"
            )
    db.dispose()
    db = Database(url)
    try:
        db.migrate()
        with db.read() as s:
            owed = {(w.kind, w.subject_id) for w in s.scalars(select(models.DeferredWork))}
            due = s.scalar(select(models.DeferredWork.due_at).limit(1))
        assert owed == {("checkpoint_gc", 7), ("delete_experiment", 9)}
        assert due is not None and due <= utcnow()
    finally:
        db.dispose()

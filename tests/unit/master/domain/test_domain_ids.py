"""Ids are never reused (SQLite's rowids would hand a deleted row's id out again), a database made
before that keeps its rows through the table rebuild, and an agent's refusal to start a container
fails its allocation instead of leaving it waiting."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import text

from services.master.domain.allocations import containers
from services.master.domain.deletion import deletion
from services.master.domain.experiments import experiments
from services.master.store.db import MIGRATIONS_DIR, Database
from tests.unit.master.domain.harness import Master

# On each database: ids come from SQLite's rowids and PostgreSQL's sequences; the rebuild is a migration.
pytestmark = pytest.mark.on_each_database


def _delete(master: Master, experiment_id: int) -> None:
    with master.ctx.unit_of_work() as w:
        exp = experiments.load(w, experiment_id)
        if exp.state not in ("COMPLETED", "CANCELED", "ERROR"):
            experiments.kill(master.ctx, w, exp)
    master.settle()
    with master.ctx.unit_of_work() as w:
        experiments.mark_deleting(master.ctx, w, experiments.load(w, experiment_id))
    deletion.delete_now(master.ctx, experiment_id)


def test_a_deleted_experiments_ids_are_not_handed_out_again(master: Master) -> None:
    first = master.create()
    (first_trial,) = master.trials(first)
    _delete(master, first)
    second = master.create()
    (second_trial,) = master.trials(second)
    assert second > first and second_trial.id > first_trial.id
    if master.db.dialect == "sqlite":  # PostgreSQL's sequences never go back by themselves
        with master.db.read() as s:
            sql = s.execute(text("SELECT sql FROM sqlite_master WHERE name = 'experiments'")).scalar_one()
        assert "AUTOINCREMENT" in sql


def test_a_database_from_before_keeps_its_rows_through_the_rebuild(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    db = Database(url)
    with db.engine.begin() as connection:
        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, "0004")
        connection.exec_driver_sql(
            "INSERT INTO users (id, username, password_hash, admin, active, display_name, created_at, "
            "modified_at) VALUES (1, 'u', 'x', 0, 1, '', '2026-01-01', '2026-01-01')"
        )
        connection.exec_driver_sql(
            "INSERT INTO experiments (id, name, description, labels, state, archived, config, "
            "original_config, owner_id, start_time, progress, resource_pool, searcher_session_id, "
            "model_definition_size, notes, checkpoint_gc_done) VALUES (7, 'e', '', '[]', 'COMPLETED', 0, "
            "'{}', '', 1, '2026-01-01', 1.0, 'default', 's', 0, '', 1)"
        )
        connection.exec_driver_sql(
            "INSERT INTO trials (id, experiment_id, request_id, state, hparams, seed, restarts, run_id, "
            "start_time, total_batches, searcher_target, searcher_stopped, progress, summary_metrics, "
            "searcher_completed_length, runner_status) VALUES (9, 7, 'r', 'COMPLETED', '{}', 1, 0, 1, "
            "'2026-01-01', 0, 0, 0, 1.0, '{}', 0, '')"
        )
    db.dispose()
    db = Database(url)
    db.migrate()
    with db.engine.begin() as connection:
        assert connection.exec_driver_sql("SELECT id FROM trials").scalars().all() == [9]
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        sql = connection.exec_driver_sql("SELECT sql FROM sqlite_master WHERE name = 'trials'").scalar_one()
        assert "AUTOINCREMENT" in sql
    db.dispose()


def test_an_agents_refusal_to_start_fails_the_allocation(master: Master) -> None:
    master.add_agent("a1")
    experiment_id = master.create(max_restarts=0)
    (trial,) = master.trials(experiment_id)
    alloc = master.live(trial.id)
    ((_agent, start),) = master.hub.commands("start")
    assert master.hub.acknowledged(start.command_id) == start.container_id
    with master.ctx.unit_of_work() as w:
        containers.start_refused(master.ctx, w, start.container_id, "start.container_id: already exists")
    master.settle()
    (ended,) = master.allocations(trial.id)
    assert ended.id == alloc.id and ended.state == "TERMINATED"
    assert "the agent refused it: start.container_id" in (ended.exit_reason or "")
    assert master.trials(experiment_id)[0].state == "ERROR"


def test_a_fork_without_files_runs_the_parents_model_definition(master: Master) -> None:
    from services.master.domain.experiments import creation
    from services.master.store import models
    from tests.unit.master.domain.harness import config_text

    parent = master.create()
    fork = creation.create(
        master.ctx,
        master.admin,
        creation.CreateRequest(
            config_text=config_text(name="fork"),
            files=[],
            activate=False,
            validate_only=False,
            parent_id=parent,
        ),
    )
    assert fork.experiment_id is not None
    with master.db.read() as s:
        ours = s.get_one(models.ModelDefinition, fork.experiment_id).archive
        theirs = s.get_one(models.ModelDefinition, parent).archive
        assert s.get_one(models.Experiment, fork.experiment_id).parent_id == parent
    assert ours == theirs

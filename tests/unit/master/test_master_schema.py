"""The migrations build exactly the schema the models declare, on SQLite and on PostgreSQL, and the
built-in workspace and project exist with the ids every experiment without a project points at."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import select

from services.master.store import models
from services.master.store.db import Database
from tests.support.databases import BACKENDS, fresh_database


@pytest.mark.parametrize("backend", BACKENDS)
def test_migrations_build_the_models_schema(backend: str, tmp_path: Path) -> None:
    with fresh_database(backend, tmp_path) as url:
        db = Database(url or f"sqlite:///{tmp_path / 'master.db'}")
        try:
            db.migrate()
            with db.engine.connect() as connection:
                assert compare_metadata(MigrationContext.configure(connection), models.Base.metadata) == []
            with db.transaction() as s:
                workspace = s.get_one(models.Workspace, models.UNCATEGORIZED_WORKSPACE_ID)
                project = s.get_one(models.Project, models.UNCATEGORIZED_PROJECT_ID)
                assert (workspace.name, workspace.immutable) == ("Uncategorized", True)
                assert (project.name, project.workspace_id, project.immutable) == ("Uncategorized", 1, True)
                # The sequences moved past the built-ins: the next ones are 2.
                s.add(models.Workspace(name="second", created_at=workspace.created_at))
                s.flush()
                assert s.scalar(select(models.Workspace.id).where(models.Workspace.name == "second")) == 2
        finally:
            db.dispose()


def test_metric_intakes_table_is_the_models_table() -> None:
    """store/metric_rows.py writes the metrics table with JSON as text: the same columns, the same
    nullability, as the ORM model that reads it."""
    from services.master.store import models
    from services.master.store.metric_rows import METRIC_ROWS

    model = models.Metric.__table__
    assert [c.name for c in METRIC_ROWS.columns] == [c.name for c in model.columns]
    for column in METRIC_ROWS.columns:
        assert column.nullable == model.columns[column.name].nullable, column.name


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_metrics_foreign_key_goes_and_comes_back(backend: str, tmp_path: Path) -> None:
    """Migration 0013 drops metrics → trials (intake's row lock stands for it), keeps the rows and,
    on SQLite, ids never reused; its downgrade puts the key back."""
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import inspect

    from services.master.store.db import MIGRATIONS_DIR

    def trial_keys(db: Database) -> list[str]:
        with db.engine.connect() as connection:
            found = inspect(connection).get_foreign_keys("metrics")
        return [fk["referred_table"] for fk in found]

    def migrate(db: Database, how: str, revision: str) -> None:
        with db.engine.begin() as connection:
            cfg = Config()
            cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
            cfg.attributes["connection"] = connection
            getattr(command, how)(cfg, revision)

    with fresh_database(backend, tmp_path) as url:
        db = Database(url or f"sqlite:///{tmp_path / 'master.db'}")
        try:
            db.migrate()
            assert trial_keys(db) == []
            migrate(db, "downgrade", "0012")
            assert trial_keys(db) == ["trials"]
            migrate(db, "upgrade", "head")
            assert trial_keys(db) == []
            if backend == "sqlite":
                with db.engine.connect() as connection:
                    schema = connection.exec_driver_sql(
                        "SELECT sql FROM sqlite_master WHERE name = 'metrics'"
                    ).scalar_one()
                assert "AUTOINCREMENT" in schema
            with db.engine.connect() as connection:
                assert compare_metadata(MigrationContext.configure(connection), models.Base.metadata) == []
        finally:
            db.dispose()

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

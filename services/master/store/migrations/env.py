"""Alembic environment: migrations run on the connection the master passes in (Database.migrate)."""

from __future__ import annotations

from alembic import context

from services.master.store.models import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through services.master.store.db.Database.migrate()")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    # SQLite cannot ALTER most things in place; batch mode rebuilds tables where needed.
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()

"""Ids are never reused: on SQLite, an INTEGER PRIMARY KEY without AUTOINCREMENT hands the id of the
newest row again once that row is deleted, so a deleted experiment's id (and its trial's, its
allocations' and containers') came back for the next one. The tables whose ids users and agents see
are rebuilt with AUTOINCREMENT. PostgreSQL's sequences never reuse an id: nothing to do there.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

TABLES = ("users", "experiments", "trials", "metrics", "task_logs")


def _rebuild(autoincrement: bool) -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for table in TABLES:
        # Database.migrate turns SQLite's foreign keys off around migrations: dropping the old table
        # must not cascade to the rows that point at it.
        with op.batch_alter_table(
            table, recreate="always", table_kwargs={"sqlite_autoincrement": autoincrement}
        ):
            pass


def upgrade() -> None:
    _rebuild(True)


def downgrade() -> None:
    _rebuild(False)

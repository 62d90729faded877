"""The Linux account a user's or a workspace's tasks run as (Determined's agent_user_group): four
columns on each, all set or all NULL (NULL: the cluster's task user, as before).

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

_TABLES = ("users", "workspaces")


def upgrade() -> None:
    for table in _TABLES:
        with op.batch_alter_table(table, recreate="never") as batch:
            batch.add_column(sa.Column("agent_uid", sa.Integer(), nullable=True))
            batch.add_column(sa.Column("agent_gid", sa.Integer(), nullable=True))
            batch.add_column(sa.Column("agent_user", sa.String(32), nullable=True))
            batch.add_column(sa.Column("agent_group", sa.String(32), nullable=True))


def downgrade() -> None:
    for table in _TABLES:
        # In place (SQLite >= 3.35 drops a column itself): a copy of the table would be refused
        # while other tables' foreign keys point at it, and would lose its AUTOINCREMENT (0005).
        with op.batch_alter_table(table, recreate="never") as batch:
            for column in ("agent_group", "agent_user", "agent_gid", "agent_uid"):
                batch.drop_column(column)

"""The cluster-wide message an admin sets (`det master cluster-message set`): kept in the database
so it outlives a restart. One is showing at a time; setting a new one ends the one before, so the
rows are the messages' history.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "cluster_messages",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("created_by", sa.Integer, nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("start_time", TS, nullable=False),
        sa.Column("end_time", TS, nullable=True),
        sa.Column("created_time", TS, nullable=False),
        sqlite_autoincrement=True,
    )


def downgrade() -> None:
    op.drop_table("cluster_messages")

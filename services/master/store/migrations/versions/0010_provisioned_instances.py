"""Dynamic agents: the instances the master's provisioner launched for each resource pool (so a
restarted master knows them, launches none twice and leaks none), and its recent decisions with
their reasons (shown on the pool).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "provisioned_instances",
        sa.Column("id", sa.String(255), primary_key=True),
        sa.Column("resource_pool", sa.String(255), nullable=False, index=True),
        sa.Column("provider", sa.String(32), nullable=False),
        sa.Column("phase", sa.String(16), nullable=False),
        sa.Column("launched_at", TS, nullable=False),
        sa.Column("connected_at", TS, nullable=True),
        sa.Column("idle_since", TS, nullable=True),
        sa.Column("disconnected_since", TS, nullable=True),
        sa.Column("drain_reason", sa.String(16), nullable=True),
        sa.Column("reason", sa.String(1024), nullable=False, server_default=""),
        sa.Column("ended_at", TS, nullable=True),
    )
    op.create_table(
        "provisioner_events",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("resource_pool", sa.String(255), nullable=False),
        sa.Column("at", TS, nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("instance_id", sa.String(255), nullable=True),
        sa.Column("message", sa.String(2048), nullable=False),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_provisioner_events_pool_id", "provisioner_events", ["resource_pool", "id"])


def downgrade() -> None:
    op.drop_index("ix_provisioner_events_pool_id", table_name="provisioner_events")
    op.drop_table("provisioner_events")
    op.drop_table("provisioned_instances")

"""System metrics of every task's containers, as the agents sample them
(domain/metrics/system_metrics.py): one row per container per sampling interval, kept at full
resolution for a retention window and thinned to one row per container and period after it.

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "task_system_metrics",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
        sa.Column("task_id", sa.String(128), nullable=False),
        sa.Column("trial_id", sa.Integer, nullable=True),
        sa.Column("allocation_id", sa.String(128), nullable=False),
        sa.Column("container_id", sa.String(160), nullable=False),
        sa.Column("agent_id", sa.String(255), nullable=False),
        sa.Column("at", TS, nullable=False),
        sa.Column("cpu_util", sa.Float, nullable=False),
        sa.Column("memory_bytes", sa.BigInteger, nullable=False),
        sa.Column("disk_read_bytes_per_s", sa.Float, nullable=True),
        sa.Column("disk_write_bytes_per_s", sa.Float, nullable=True),
        sa.Column("net_recv_bytes_per_s", sa.Float, nullable=True),
        sa.Column("net_sent_bytes_per_s", sa.Float, nullable=True),
        sa.Column("processes", sa.Integer, nullable=False),
        sa.Column("gpus", sa.JSON, nullable=False),
        sa.Column("thinned", sa.Boolean, nullable=False, server_default=sa.false()),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_task_system_metrics_task_id_at", "task_system_metrics", ["task_id", "at"])
    # A trial's followers read what came after the last row they saw (the profiler API).
    op.create_index("ix_task_system_metrics_trial_id_id", "task_system_metrics", ["trial_id", "id"])
    # Thinning finds the oldest rows not yet thinned without walking the thinned ones.
    op.create_index("ix_task_system_metrics_thinned_at", "task_system_metrics", ["thinned", "at"])


def downgrade() -> None:
    op.drop_table("task_system_metrics")

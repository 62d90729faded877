"""Trial logs, metrics and checkpoints.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
BIGID = sa.BigInteger().with_variant(sa.Integer, "sqlite")


def upgrade() -> None:
    op.create_table(
        "task_logs",
        sa.Column("id", BIGID, primary_key=True),
        sa.Column("trial_id", sa.Integer, nullable=False),
        sa.Column("allocation_id", sa.String(128), nullable=False),
        sa.Column("container_id", sa.String(160), nullable=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("agent_id", sa.String(255), nullable=False),
        sa.Column("rank", sa.Integer, nullable=True),
        sa.Column("stdtype", sa.String(16), nullable=False),
        sa.Column("level", sa.String(16), nullable=False),
        sa.Column("source", sa.String(32), nullable=False),
        sa.Column("timestamp", TS, nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.UniqueConstraint("container_id", "seq", name="uq_task_logs_container_seq"),
    )
    op.create_index("ix_task_logs_trial_id_id", "task_logs", ["trial_id", "id"])
    op.create_table(
        "metrics",
        sa.Column("id", BIGID, primary_key=True),
        sa.Column("trial_id", sa.Integer, sa.ForeignKey("trials.id", ondelete="CASCADE"), nullable=False),
        sa.Column("trial_run_id", sa.Integer, nullable=False),
        sa.Column("seq", sa.BigInteger, nullable=True),
        sa.Column("group_name", sa.String(64), nullable=False),
        sa.Column("steps_completed", sa.BigInteger, nullable=False),
        sa.Column("report_time", TS, nullable=False),
        sa.Column("metrics", sa.JSON, nullable=False),
        sa.Column("batch_metrics", sa.JSON, nullable=True),
        sa.Column("archived", sa.Boolean, nullable=False),
        sa.UniqueConstraint("trial_id", "trial_run_id", "seq", name="uq_metrics_trial_run_seq"),
    )
    op.create_index("ix_metrics_trial_group_steps", "metrics", ["trial_id", "group_name", "steps_completed"])
    op.create_table(
        "checkpoints",
        sa.Column("uuid", sa.String(64), primary_key=True),
        sa.Column("trial_id", sa.Integer, sa.ForeignKey("trials.id", ondelete="CASCADE"), nullable=False),
        sa.Column("allocation_id", sa.String(128), nullable=False),
        sa.Column("task_id", sa.String(128), nullable=False),
        sa.Column("report_time", TS, nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("resources", sa.JSON, nullable=False),
        sa.Column("metadata", sa.JSON, nullable=False),
        sa.Column("steps_completed", sa.BigInteger, nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_checkpoints_trial_id", "checkpoints", ["trial_id"])


def downgrade() -> None:
    op.drop_table("checkpoints")
    op.drop_table("metrics")
    op.drop_table("task_logs")

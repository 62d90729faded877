"""Webhooks (Determined's): the webhooks, their triggers, the task-log triggers already fired per
task, and the outbox of posts owed to receivers (written with the change that owes them).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
AUTOINCREMENT = {"sqlite_autoincrement": True}


def upgrade() -> None:
    op.create_table(
        "webhooks",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("webhook_type", sa.String(16), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column(
            "workspace_id",
            sa.Integer,
            sa.ForeignKey("workspaces.id", ondelete="CASCADE"),
            nullable=True,
            index=True,
        ),
        sa.Column("created_at", TS, nullable=False),
        **AUTOINCREMENT,
    )
    op.create_table(
        "webhook_triggers",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "webhook_id",
            sa.Integer,
            sa.ForeignKey("webhooks.id", ondelete="CASCADE"),
            nullable=False,
            index=True,
        ),
        sa.Column("trigger_type", sa.String(32), nullable=False, index=True),
        sa.Column("condition", sa.JSON, nullable=False),
        **AUTOINCREMENT,
    )
    op.create_table(
        "webhook_task_log_matches",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("task_id", sa.String(128), nullable=False),
        sa.Column(
            "trigger_id",
            sa.Integer,
            sa.ForeignKey("webhook_triggers.id", ondelete="CASCADE"),
            nullable=False,
            index=True,
        ),
        sa.UniqueConstraint("task_id", "trigger_id", name="uq_webhook_task_log_matches"),
    )
    op.create_table(
        "webhook_events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("due_at", TS, nullable=False, index=True),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("last_error", sa.Text, nullable=False),
        sa.Column("claimed_by", sa.String(64), nullable=False),
        sa.Column("claimed_until", TS, nullable=True),
        sa.Column("created_at", TS, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("webhook_events")
    op.drop_table("webhook_task_log_matches")
    op.drop_table("webhook_triggers")
    op.drop_table("webhooks")

"""The audit trail (domain/audit/): one row per call that changed something or tried to, appended
in batches, pruned oldest first. Ids are never reused (SQLite's AUTOINCREMENT), so a page's
`before_id` keeps its meaning while older rows are pruned.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
BIGID = sa.BigInteger().with_variant(sa.Integer, "sqlite")


def upgrade() -> None:
    op.create_table(
        "audit_events",
        sa.Column("id", BIGID, primary_key=True),
        sa.Column("at", TS, nullable=False, index=True),
        sa.Column("user_id", sa.Integer, nullable=True),
        sa.Column("username", sa.String(128), nullable=False),
        sa.Column("actor", sa.String(16), nullable=False),
        sa.Column("allocation_id", sa.String(128), nullable=False),
        sa.Column("method", sa.String(128), nullable=False),
        sa.Column("targets", sa.String(2048), nullable=False),
        sa.Column("outcome", sa.String(32), nullable=False),
        sa.Column("error", sa.String(512), nullable=False),
        sa.Column("address", sa.String(128), nullable=False),
        sa.Column("transport", sa.String(8), nullable=False),
        sa.Column("duration_ms", sa.Float, nullable=False),
        sa.Index("ix_audit_events_username_id", "username", "id"),
        sa.Index("ix_audit_events_user_id_id", "user_id", "id"),
        sqlite_autoincrement=True,
    )


def downgrade() -> None:
    op.drop_table("audit_events")

"""Allocations remember the searcher target their trial had when they were placed, so a promotion
that arrives while the trial is exiting resumes it instead of ending it.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("allocations") as batch:
        batch.add_column(sa.Column("searcher_target", sa.BigInteger, nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("allocations") as batch:
        batch.drop_column("searcher_target")

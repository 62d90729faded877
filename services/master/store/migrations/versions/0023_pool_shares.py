"""Fair share's weights and quotas per pool: a workspace's (user_id 0) or one of its users'.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pool_shares",
        sa.Column("pool_name", sa.String(255), primary_key=True),
        sa.Column(
            "workspace_id",
            sa.Integer,
            sa.ForeignKey("workspaces.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("user_id", sa.Integer, primary_key=True),
        sa.Column("weight", sa.Float, nullable=False),
        sa.Column("guaranteed_slots", sa.Integer, nullable=False),
        sa.Column("max_slots", sa.Integer, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("pool_shares")

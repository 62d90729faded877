"""Resource pools bound to workspaces (Determined's rp_workspace_bindings): one row per pool and
workspace, gone with the workspace.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pool_bindings",
        sa.Column(
            "workspace_id",
            sa.Integer,
            sa.ForeignKey("workspaces.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("pool_name", sa.String(255), primary_key=True),
    )
    op.create_index("ix_pool_bindings_pool_name", "pool_bindings", ["pool_name"])


def downgrade() -> None:
    op.drop_index("ix_pool_bindings_pool_name", table_name="pool_bindings")
    op.drop_table("pool_bindings")

"""Log policies (Determined's `log_policies`): what a trial's log lines matched. A `cancel_retries`
match makes its next failure final; an `exclude_node` match keeps its later runs off the agents
whose lines matched.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # In place (SQLite's ALTER TABLE): a rebuilt table would lose the AUTOINCREMENT that keeps a
    # deleted trial's id from being handed out again (0005).
    with op.batch_alter_table("trials", recreate="never") as batch:
        batch.add_column(
            sa.Column("log_policy_no_retry", sa.Boolean, nullable=False, server_default=sa.false())
        )
        batch.add_column(sa.Column("excluded_agents", sa.JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trials", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.drop_column("excluded_agents")
        batch.drop_column("log_policy_no_retry")

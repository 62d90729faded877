"""Log policies (Determined's `log_policies`): what a trial's log lines matched. A `cancel_retries`
match makes its next failure final; an `exclude_node` match keeps its later runs off the agents
whose lines matched.

Revision ID: 0017_wsckpt
Revises: 0016
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017_wsckpt"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(
            sa.Column("log_policy_no_retry", sa.Boolean, nullable=False, server_default=sa.false())
        )
        batch.add_column(sa.Column("excluded_agents", sa.JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("excluded_agents")
        batch.drop_column("log_policy_no_retry")

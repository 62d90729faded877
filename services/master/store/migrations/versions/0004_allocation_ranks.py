"""Multi-container allocations: which rank's failure took an allocation down (so stopping its
siblings is not read as a kill), and the port block its processes meet on; and what a trial's
harness says it is doing (Determined's runner metadata).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("allocations") as batch:
        batch.add_column(sa.Column("failed_rank", sa.Integer, nullable=True))
        batch.add_column(sa.Column("port_offset", sa.Integer, nullable=True))
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("runner_status", sa.Text, nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("runner_status")
    with op.batch_alter_table("allocations") as batch:
        batch.drop_column("port_offset")
        batch.drop_column("failed_rank")

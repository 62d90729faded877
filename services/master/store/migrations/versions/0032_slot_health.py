"""Slot health and topology: a slot whose device failed (a GPU's critical Xid or uncorrected ECC
error, as its agent reports it) is out of service until an admin enables it (`unhealthy` says
why; `fault_at` is the time of the latest fault acted on, so a fault reported again after a
reconnect is not acted on twice). `numa_node` and `nvlink_domain` say where a GPU sits (-1:
unknown), for packing multi-GPU work.

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("agent_slots") as batch:
        batch.add_column(sa.Column("unhealthy", sa.String(512), nullable=False, server_default=""))
        batch.add_column(sa.Column("fault_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("numa_node", sa.Integer, nullable=False, server_default="-1"))
        batch.add_column(sa.Column("nvlink_domain", sa.Integer, nullable=False, server_default="-1"))


def downgrade() -> None:
    with op.batch_alter_table("agent_slots") as batch:
        for column in ("nvlink_domain", "numa_node", "fault_at", "unhealthy"):
            batch.drop_column(column)

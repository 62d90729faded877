"""Early hand-over of slots: an allocation whose task said it is exiting offers its slots to the
next allocation before its container has ended.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("allocations") as batch:
        batch.add_column(sa.Column("releasing", sa.Boolean, nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("allocations") as batch:
        batch.drop_column("releasing")

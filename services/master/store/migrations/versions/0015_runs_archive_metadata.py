"""A trial seen as Determined's run carries two things of its own: whether it is archived (the
runs API archives runs apart from their experiment) and the metadata trial code sets
(`core.train.set_metadata`). Existing trials are not archived and have no metadata.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # In place (SQLite adds columns with ALTER TABLE): a rebuilt table would lose the AUTOINCREMENT
    # that keeps a deleted trial's id from being handed out again (0005).
    with op.batch_alter_table("trials", recreate="never") as batch:
        batch.add_column(sa.Column("archived", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("run_metadata", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trials", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.drop_column("run_metadata")
        batch.drop_column("archived")

"""Streaming updates (Determined's `/stream`, behind the `streaming_updates` feature switch): each
streamed row carries `seq`, the sequence number of its last change, so that a client that
reconnects with the highest seq it saw (`since`) is sent what changed while it was away. Existing
rows start at 0: a client's first sync sends them all anyway.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

STREAMED_TABLES = ("projects", "models", "model_versions")


def upgrade() -> None:
    for table in STREAMED_TABLES:
        # In place (SQLite's ALTER TABLE): a rebuilt table would lose the AUTOINCREMENT that keeps
        # a deleted row's id from being handed out again.
        with op.batch_alter_table(table, recreate="never") as batch:
            batch.add_column(sa.Column("seq", sa.BigInteger, nullable=False, server_default="0"))


def downgrade() -> None:
    for table in STREAMED_TABLES:
        with op.batch_alter_table(table, table_kwargs={"sqlite_autoincrement": True}) as batch:
            batch.drop_column("seq")

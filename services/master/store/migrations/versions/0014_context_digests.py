"""Context archives named by their SHA-256: a start sends it, and an agent that already holds that
archive unpacks its own copy instead of fetching it again (every trial of an experiment has the
same). Rows stored before keep none; their starts fetch, as before.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ("model_definitions", "task_contexts"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("digest", sa.String(64), nullable=True))


def downgrade() -> None:
    for table in ("model_definitions", "task_contexts"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("digest")

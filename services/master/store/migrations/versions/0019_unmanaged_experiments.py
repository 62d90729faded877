"""Unmanaged experiments (Determined's Core API v2 "detached mode"): code run outside the cluster
reports into an experiment and trial the master never schedules nor searches for. An experiment
says it is unmanaged and may carry the external id its code resumes it by; a trial remembers when
its code last said it was alive (a heartbeat), so one that went silent can be marked ERROR.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

# Both tables keep ids that are never reused (0005): SQLite's rebuild of a table must say so again.
AUTOINCREMENT = {"sqlite_autoincrement": True}


def upgrade() -> None:
    with op.batch_alter_table("experiments", table_kwargs=AUTOINCREMENT) as batch:
        batch.add_column(sa.Column("unmanaged", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("external_experiment_id", sa.String(128), nullable=True))
        batch.create_unique_constraint("uq_experiments_external_id", ["external_experiment_id"])
    with op.batch_alter_table("trials", table_kwargs=AUTOINCREMENT) as batch:
        batch.add_column(sa.Column("last_activity", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trials", table_kwargs=AUTOINCREMENT) as batch:
        batch.drop_column("last_activity")
    with op.batch_alter_table("experiments", table_kwargs=AUTOINCREMENT) as batch:
        batch.drop_constraint("uq_experiments_external_id", type_="unique")
        batch.drop_column("external_experiment_id")
        batch.drop_column("unmanaged")

"""What the start forecast measures (domain/scheduling/expected_runs.py): a trial's pace, from when
its progress was last reported (`progress_at`) and the first report of its current run
(`pace_run_id`, `pace_progress`, `pace_at`), so that a run's pace is what it did since that report,
not its trial's whole progress over the run's time (a resumed run starts part way); and when an
allocation's preemption was requested (`allocations.preempt_requested_at`), so that the time
preempted allocations take to give up their slots is measured. Existing rows have none: their
forecasts fall back to what the master could tell before.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None

COLUMNS = (
    ("progress_at", sa.DateTime(timezone=True)),
    ("pace_run_id", sa.Integer),
    ("pace_progress", sa.Float),
    ("pace_at", sa.DateTime(timezone=True)),
)


def upgrade() -> None:
    # In place (SQLite's ALTER TABLE): a rebuilt table would lose the AUTOINCREMENT that keeps a
    # deleted row's id from being handed out again.
    with op.batch_alter_table("trials", recreate="never") as batch:
        for name, kind in COLUMNS:
            batch.add_column(sa.Column(name, kind, nullable=True))
    with op.batch_alter_table("allocations", recreate="never") as batch:
        batch.add_column(sa.Column("preempt_requested_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index("ix_allocations_preempt_requested_at", "allocations", ["preempt_requested_at"])


def downgrade() -> None:
    op.drop_index("ix_allocations_preempt_requested_at", table_name="allocations")
    with op.batch_alter_table("allocations") as batch:
        batch.drop_column("preempt_requested_at")
    with op.batch_alter_table("trials", table_kwargs={"sqlite_autoincrement": True}) as batch:
        for name, _ in COLUMNS:
            batch.drop_column(name)

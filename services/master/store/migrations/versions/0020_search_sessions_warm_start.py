"""Each trial remembers the search session that last asked for it: `det experiment continue` on a
grid or random search starts the search again as a new session, which asks again for the trials the
experiment has; one asked for by an earlier session is one to retry (or, completed, to report to the
new session), while one asked for twice by the same session is a retried answer, applied once.
Trials stored before belong to their experiment's current session.

And warm start (searcher.source_trial_id / source_checkpoint_uuid): the checkpoint an experiment's
trials start from, resolved at creation, on the experiment and on each trial it makes (Determined's
warm_start_checkpoint_id). Rows stored before had none.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


# Columns are added in place (SQLite's ALTER TABLE), and a table rebuilt to drop them keeps its
# AUTOINCREMENT: ids are never reused (0005).
AUTOINCREMENT = {"sqlite_autoincrement": True}


def upgrade() -> None:
    with op.batch_alter_table("trials", recreate="never") as batch:
        batch.add_column(sa.Column("search_session_id", sa.String(64), nullable=True))
        batch.add_column(sa.Column("warm_start_checkpoint_uuid", sa.String(64), nullable=True))
    with op.batch_alter_table("experiments", recreate="never") as batch:
        batch.add_column(sa.Column("warm_start_checkpoint_uuid", sa.String(64), nullable=True))
    op.execute(
        "UPDATE trials SET search_session_id = "
        "(SELECT experiments.searcher_session_id FROM experiments "
        "WHERE experiments.id = trials.experiment_id)"
    )


def downgrade() -> None:
    with op.batch_alter_table("experiments", table_kwargs=AUTOINCREMENT) as batch:
        batch.drop_column("warm_start_checkpoint_uuid")
    with op.batch_alter_table("trials", table_kwargs=AUTOINCREMENT) as batch:
        batch.drop_column("warm_start_checkpoint_uuid")
        batch.drop_column("search_session_id")

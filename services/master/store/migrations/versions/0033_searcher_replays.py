"""A search's state is stored every so many events, not with every answer: `state_seq` is the
sequence number the stored state belongs to (`seq` stays the number of events the search applied),
and `searcher_replays` keeps the events applied since that state, sent again after a restore from
it. Existing snapshots hold the state of their own seq.

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("searcher_snapshots") as batch:
        batch.add_column(sa.Column("state_seq", sa.BigInteger, nullable=False, server_default="0"))
    op.execute("UPDATE searcher_snapshots SET state_seq = seq")
    op.create_table(
        "searcher_replays",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
        sa.Column(
            "experiment_id",
            sa.Integer,
            sa.ForeignKey("experiments.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("payload", sa.LargeBinary, nullable=False),
    )
    op.create_index("ix_searcher_replays_experiment_id", "searcher_replays", ["experiment_id"])


def downgrade() -> None:
    op.drop_index("ix_searcher_replays_experiment_id", "searcher_replays")
    op.drop_table("searcher_replays")
    with op.batch_alter_table("searcher_snapshots") as batch:
        batch.drop_column("state_seq")

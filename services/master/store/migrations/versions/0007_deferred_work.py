"""Work the master owes (checkpoint GC, deletions) in a durable table, retried until done instead of
tried once and then only at the next start. What an older master left owed (an ended experiment
not yet collected, deletions under way) is written into it here, so nothing is lost on upgrade.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
_COLUMNS = "kind, subject_id, revision, due_at, attempts, last_error, claimed_by, created_at"


def _owe(kind: str, subjects: str, **params: object) -> None:
    """Owe `kind` for every id that the SELECT `subjects` returns, due now."""
    op.execute(
        sa.text(
            f"INSERT INTO deferred_work ({_COLUMNS}) "
            f"SELECT :kind, id, 1, CURRENT_TIMESTAMP, 0, '', '', CURRENT_TIMESTAMP FROM ({subjects}) AS owed"
        ).bindparams(kind=kind, **params)
    )


def upgrade() -> None:
    op.create_table(
        "deferred_work",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("subject_id", sa.Integer, nullable=False),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.Column("due_at", TS, nullable=False, index=True),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("last_error", sa.Text, nullable=False),
        sa.Column("claimed_by", sa.String(64), nullable=False),
        sa.Column("claimed_until", TS, nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.UniqueConstraint("kind", "subject_id", name="uq_deferred_work_kind_subject"),
    )
    _owe(
        "checkpoint_gc",
        "SELECT id FROM experiments WHERE state IN ('COMPLETED', 'CANCELED', 'ERROR') "
        "AND checkpoint_gc_done = :no",
        no=False,
    )
    _owe("delete_experiment", "SELECT id FROM experiments WHERE state = 'DELETING'")
    _owe("finish_workspace_deletion", "SELECT id FROM workspaces WHERE state = 'DELETING'")
    _owe(
        "finish_project_deletion",
        "SELECT p.id FROM projects p JOIN workspaces ws ON ws.id = p.workspace_id "
        "WHERE p.state = 'DELETING' AND ws.state != 'DELETING'",
    )


def downgrade() -> None:
    op.drop_table("deferred_work")

"""Shell secrets: the key pair the master makes for each shell (Determined's per-shell SSH keys).
The public half is handed to the shell's SSH server through its environment; the private half is
given only to the shell's owner or an admin (LaunchShell, GetShell). Kept beside the task, not in
its config, because a task's config is shown to whoever may read the task.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "shell_keys",
        sa.Column("task_id", sa.String(128), sa.ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("private_key", sa.Text, nullable=False),
        sa.Column("public_key", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("shell_keys")

"""Access tokens (Determined's /api/v1/tokens) beside login sessions, in the same table, as
Determined keeps them: each row says which it is (`token_type`), and an access token has a
description and, once revoked, when (`revoked_at`; its row stays so that its owner still sees it
with `det token list --show-inactive`). A token is checked by its hash on every call, through the
same unique index as a session.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # In place (SQLite's ALTER TABLE ADD COLUMN): the existing sessions become sessions.
    with op.batch_alter_table("user_sessions", recreate="never") as batch:
        batch.add_column(sa.Column("token_type", sa.String(16), nullable=False, server_default="session"))
        batch.add_column(sa.Column("description", sa.String(255), nullable=False, server_default=""))
        batch.add_column(sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    # Access tokens have no meaning without their columns: they go, sessions stay.
    op.execute("DELETE FROM user_sessions WHERE token_type <> 'session'")
    with op.batch_alter_table("user_sessions") as batch:
        batch.drop_column("revoked_at")
        batch.drop_column("description")
        batch.drop_column("token_type")

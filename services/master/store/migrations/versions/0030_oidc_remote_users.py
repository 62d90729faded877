"""Users who sign in through single sign-on (OpenID Connect, domain/identity/sso_users.py):
`users.remote`, Determined's name for them. A remote user has no password (password login refuses
it), and single sign-on logs in only remote users, so a provider's claim never takes over a local
account ("admin" included). Existing users are local.

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # In place (SQLite's ALTER TABLE): a rebuilt table would lose the AUTOINCREMENT that keeps a
    # deleted row's id from being handed out again.
    with op.batch_alter_table("users", recreate="never") as batch:
        batch.add_column(sa.Column("remote", sa.Boolean, nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("users", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.drop_column("remote")

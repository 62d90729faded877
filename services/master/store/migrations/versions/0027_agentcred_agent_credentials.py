"""Agents' own credentials (domain/identity/agent_credentials.py): the one-time join tokens admins
make, the cluster's enrolment secrets (one current, the rotated ones kept as retired), and the
credential each agent id was issued, with its revocation. Every secret is stored as its sha256 only.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "agent_join_tokens",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("agent_id", sa.String(255), nullable=True),
        sa.Column("created_by", sa.String(255), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("expires_at", TS, nullable=False),
        sa.Column("used_at", TS, nullable=True),
        sa.Column("used_by_agent", sa.String(255), nullable=True),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "agent_enrolment_secrets",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("secret_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("created_by", sa.String(255), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("retired_at", TS, nullable=True),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "agent_credentials",
        sa.Column("agent_id", sa.String(255), primary_key=True),
        # NULL: an agent revoked before it ever enrolled (it joined with the cluster token).
        sa.Column("secret_hash", sa.String(64), nullable=True, unique=True),
        sa.Column("issued_at", TS, nullable=True),
        sa.Column("issued_with", sa.String(64), nullable=False, server_default=""),
        sa.Column("revoked_at", TS, nullable=True),
        sa.Column("revoked_by", sa.String(255), nullable=False, server_default=""),
    )


def downgrade() -> None:
    op.drop_table("agent_credentials")
    op.drop_table("agent_enrolment_secrets")
    op.drop_table("agent_join_tokens")

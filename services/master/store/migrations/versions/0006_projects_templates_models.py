"""Determined users' everyday objects, and a version on experiment configs (edits now change
them): workspaces and projects (every experiment belongs to one; Determined's built-in
"Uncategorized" workspace and project hold those that name none), config templates, and the
model registry (models and their versions, each pointing at a checkpoint that the foreign key
keeps).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

AUTOINCREMENT = {"sqlite_autoincrement": True}
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "workspaces",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(255), nullable=False, unique=True),
        sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id"), nullable=True),
        sa.Column("archived", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("immutable", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("state", sa.String(32), nullable=False, server_default=""),
        sa.Column("default_compute_pool", sa.String(255), nullable=False, server_default=""),
        sa.Column("default_aux_pool", sa.String(255), nullable=False, server_default=""),
        sa.Column("checkpoint_storage", sa.JSON, nullable=True),
        sa.Column("created_at", TS, nullable=False),
        **AUTOINCREMENT,
    )
    op.create_table(
        "projects",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("workspace_id", sa.Integer, sa.ForeignKey("workspaces.id"), nullable=False, index=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("key", sa.String(16), nullable=False, unique=True),
        sa.Column("description", sa.Text, nullable=False, server_default=""),
        sa.Column("notes", sa.JSON, nullable=False),
        sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id"), nullable=True),
        sa.Column("archived", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("immutable", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("state", sa.String(32), nullable=False, server_default=""),
        sa.Column("created_at", TS, nullable=False),
        sa.UniqueConstraint("workspace_id", "name", name="uq_projects_workspace_name"),
        **AUTOINCREMENT,
    )
    # The built-ins, owned by the first admin if there is one yet (else set at start-up).
    admin = "(SELECT MIN(id) FROM users WHERE admin = :yes)"
    op.execute(
        sa.text(
            "INSERT INTO workspaces (id, name, user_id, archived, immutable, state, default_compute_pool, "
            f"default_aux_pool, created_at) VALUES (1, 'Uncategorized', {admin}, :no, :yes, '', '', '', "
            "CURRENT_TIMESTAMP)"
        ).bindparams(yes=True, no=False)
    )
    op.execute(
        sa.text(
            "INSERT INTO projects (id, workspace_id, name, key, description, notes, user_id, archived, "
            f"immutable, state, created_at) VALUES (1, 1, 'Uncategorized', 'UNCAT', '', '[]', {admin}, :no, "
            ":yes, '', CURRENT_TIMESTAMP)"
        ).bindparams(yes=True, no=False)
    )
    if op.get_bind().dialect.name == "postgresql":
        # Explicit ids do not move PostgreSQL's sequences: the next workspace and project are 2.
        op.execute("SELECT setval(pg_get_serial_sequence('workspaces', 'id'), 1)")
        op.execute("SELECT setval(pg_get_serial_sequence('projects', 'id'), 1)")
    with op.batch_alter_table("experiments", table_kwargs=AUTOINCREMENT) as batch:
        batch.add_column(sa.Column("project_id", sa.Integer, nullable=False, server_default="1"))
        batch.add_column(sa.Column("config_version", sa.Integer, nullable=False, server_default="0"))
        batch.create_index("ix_experiments_project_id", ["project_id"])
        batch.create_foreign_key("fk_experiments_project_id", "projects", ["project_id"], ["id"])

    op.create_table(
        "templates",
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("config", sa.JSON, nullable=False),
        sa.Column("workspace_id", sa.Integer, sa.ForeignKey("workspaces.id"), nullable=False),
        sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id"), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
    )
    op.create_table(
        "models",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(255), nullable=False, unique=True),
        sa.Column("description", sa.Text, nullable=False, server_default=""),
        sa.Column("metadata", sa.JSON, nullable=False),
        sa.Column("labels", sa.JSON, nullable=False),
        sa.Column("notes", sa.Text, nullable=False, server_default=""),
        sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False, index=True),
        sa.Column("workspace_id", sa.Integer, sa.ForeignKey("workspaces.id"), nullable=False),
        sa.Column("archived", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("creation_time", TS, nullable=False),
        sa.Column("last_updated_time", TS, nullable=False),
        **AUTOINCREMENT,
    )
    op.create_table(
        "model_versions",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "model_id", sa.Integer, sa.ForeignKey("models.id", ondelete="CASCADE"), nullable=False, index=True
        ),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column(
            "checkpoint_uuid", sa.String(64), sa.ForeignKey("checkpoints.uuid"), nullable=False, index=True
        ),
        sa.Column("name", sa.String(255), nullable=False, server_default=""),
        sa.Column("comment", sa.Text, nullable=False, server_default=""),
        sa.Column("notes", sa.Text, nullable=False, server_default=""),
        sa.Column("metadata", sa.JSON, nullable=False),
        sa.Column("labels", sa.JSON, nullable=False),
        sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
        sa.Column("creation_time", TS, nullable=False),
        sa.Column("last_updated_time", TS, nullable=False),
        sa.UniqueConstraint("model_id", "version", name="uq_model_versions_model_version"),
        **AUTOINCREMENT,
    )


def downgrade() -> None:
    op.drop_table("model_versions")
    op.drop_table("models")
    op.drop_table("templates")
    with op.batch_alter_table("experiments", table_kwargs=AUTOINCREMENT) as batch:
        batch.drop_constraint("fk_experiments_project_id", type_="foreignkey")
        batch.drop_index("ix_experiments_project_id")
        batch.drop_column("config_version")
        batch.drop_column("project_id")
    op.drop_table("projects")
    op.drop_table("workspaces")

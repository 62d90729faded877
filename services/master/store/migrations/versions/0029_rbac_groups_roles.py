"""User groups and role assignments (Determined's RBAC), and the assignments that keep an existing
cluster behaving as it did before roles existed.

Before this migration the rule was: anyone logged in reads everything and creates experiments,
projects and workspaces anywhere; the owner or an admin changes a thing. After it, every decision
comes from roles (domain/identity/roles.py), and this migration gives every existing user what
they could do before, through one group an admin can narrow later:

- the group "everyone" (which new users join too: `joins_new_users`) holds
  - Editor on the Uncategorized workspace: the shared sandbox every user keeps;
  - Editor cluster-wide: create and read everywhere, change what one owns (Editor changes only
    its own objects in Cairn; README "Roles"). `det rbac unassign-role Editor -g everyone` makes
    the other workspaces private to the users and groups given roles on them;
  - WorkspaceCreator cluster-wide: anyone may create a workspace, as before;
- every existing user is a member of "everyone";
- the owner of each existing workspace (Uncategorized aside) is its WorkspaceAdmin, as
  Determined makes a workspace's creator;
- admins need no row: the admin flag is ClusterAdmin (identity/grants.py).

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-02
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
# Determined's role ids (identity/roles.py), fixed here: a migration never imports domain code.
WORKSPACE_ADMIN, WORKSPACE_CREATOR, EDITOR = 2, 3, 5
UNCATEGORIZED = 1
EVERYONE = "everyone"


def upgrade() -> None:
    op.create_table(
        "user_groups",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(255), nullable=False, unique=True),
        sa.Column("joins_new_users", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("created_at", TS, nullable=False),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "user_group_members",
        sa.Column(
            "group_id", sa.Integer, sa.ForeignKey("user_groups.id", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id", ondelete="CASCADE"), primary_key=True),
    )
    op.create_index("ix_user_group_members_user_id", "user_group_members", ["user_id"])
    op.create_table(
        "role_assignments",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("role_id", sa.Integer, nullable=False),
        sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=True),
        sa.Column("group_id", sa.Integer, sa.ForeignKey("user_groups.id", ondelete="CASCADE"), nullable=True),
        sa.Column(
            "workspace_id", sa.Integer, sa.ForeignKey("workspaces.id", ondelete="CASCADE"), nullable=True
        ),
        sa.Column("created_at", TS, nullable=False),
        sa.CheckConstraint("(user_id IS NULL) <> (group_id IS NULL)", name="ck_role_assignments_one_holder"),
        sqlite_autoincrement=True,
    )
    for column in ("user_id", "group_id", "workspace_id"):
        op.create_index(f"ix_role_assignments_{column}", "role_assignments", [column])

    groups = sa.table(
        "user_groups",
        sa.column("id", sa.Integer),
        sa.column("name", sa.String),
        sa.column("joins_new_users", sa.Boolean),
        sa.column("created_at", TS),
    )
    members = sa.table(
        "user_group_members", sa.column("group_id", sa.Integer), sa.column("user_id", sa.Integer)
    )
    assignments = sa.table(
        "role_assignments",
        sa.column("role_id", sa.Integer),
        sa.column("user_id", sa.Integer),
        sa.column("group_id", sa.Integer),
        sa.column("workspace_id", sa.Integer),
        sa.column("created_at", TS),
    )
    users = sa.table("users", sa.column("id", sa.Integer))
    workspaces = sa.table(
        "workspaces",
        sa.column("id", sa.Integer),
        sa.column("user_id", sa.Integer),
        sa.column("immutable", sa.Boolean),
    )
    bind = op.get_bind()
    now = datetime.now(UTC)
    bind.execute(sa.insert(groups).values(name=EVERYONE, joins_new_users=True, created_at=now))
    everyone = bind.execute(sa.select(groups.c.id).where(groups.c.name == EVERYONE)).scalar_one()
    user_ids = [row[0] for row in bind.execute(sa.select(users.c.id).order_by(users.c.id))]
    if user_ids:
        bind.execute(sa.insert(members), [{"group_id": everyone, "user_id": u} for u in user_ids])
    rows = [
        {"role_id": EDITOR, "user_id": None, "group_id": everyone, "workspace_id": UNCATEGORIZED},
        {"role_id": EDITOR, "user_id": None, "group_id": everyone, "workspace_id": None},
        {"role_id": WORKSPACE_CREATOR, "user_id": None, "group_id": everyone, "workspace_id": None},
    ]
    owned = bind.execute(
        sa.select(workspaces.c.id, workspaces.c.user_id)
        .where(workspaces.c.user_id.is_not(None))
        .where(workspaces.c.immutable.is_(sa.false()))
        .order_by(workspaces.c.id)
    )
    rows += [
        {"role_id": WORKSPACE_ADMIN, "user_id": owner, "group_id": None, "workspace_id": workspace_id}
        for workspace_id, owner in owned
    ]
    bind.execute(sa.insert(assignments), [{**row, "created_at": now} for row in rows])


def downgrade() -> None:
    for column in ("workspace_id", "group_id", "user_id"):
        op.drop_index(f"ix_role_assignments_{column}", table_name="role_assignments")
    op.drop_table("role_assignments")
    op.drop_index("ix_user_group_members_user_id", table_name="user_group_members")
    op.drop_table("user_group_members")
    op.drop_table("user_groups")

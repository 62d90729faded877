"""Migration 0025 on a cluster from before roles, on SQLite and PostgreSQL: every existing user is
in "everyone", which is Editor of Uncategorized, Editor and WorkspaceCreator cluster-wide; each
workspace's owner administers it; so each user may do what they could before (grants.py reads
it so)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import select, text

from services.common.principal import Principal
from services.master.domain.identity import access, grants
from services.master.domain.identity.permissions import Permission
from services.master.store import models
from services.master.store.db import MIGRATIONS_DIR, Database
from tests.support.databases import BACKENDS, fresh_database

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("backend", BACKENDS)
def test_existing_users_keep_what_they_could_do(backend: str, tmp_path: Path) -> None:
    with fresh_database(backend, tmp_path) as url:
        db = Database(url or f"sqlite:///{tmp_path / 'old.db'}")
        try:
            with db.engine.begin() as connection:
                cfg = Config()
                cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
                cfg.attributes["connection"] = connection
                command.upgrade(cfg, "0028")
                for name, admin in (("root", True), ("bob", False), ("carol", False)):
                    connection.execute(
                        text(
                            "INSERT INTO users (username, password_hash, admin, active, display_name, "
                            "created_at, modified_at) VALUES (:n, 'x', :a, :t, '', :now, :now)"
                        ),
                        {"n": name, "a": admin, "t": True, "now": NOW},
                    )
                bob = connection.execute(text("SELECT id FROM users WHERE username = 'bob'")).scalar_one()
                connection.execute(
                    text(
                        "INSERT INTO workspaces (name, user_id, archived, immutable, state, "
                        "default_compute_pool, default_aux_pool, created_at) "
                        "VALUES ('bobs', :u, :f, :f, '', '', '', :now)"
                    ),
                    {"u": bob, "f": False, "now": NOW},
                )
            db.dispose()
            db = Database(url or f"sqlite:///{tmp_path / 'old.db'}")
            db.migrate()
            with db.read() as s:
                users = {u.username: u.id for u in s.scalars(select(models.User))}
                (everyone,) = s.scalars(select(models.UserGroup)).all()
                members = set(s.scalars(select(models.UserGroupMember.user_id)))
                rows = {
                    (r.role_id, r.user_id, r.group_id, r.workspace_id)
                    for r in s.scalars(select(models.RoleAssignment))
                }
                bobs = s.scalar(select(models.Workspace.id).where(models.Workspace.name == "bobs"))
                assert (everyone.name, everyone.joins_new_users) == ("everyone", True)
                assert members == set(users.values())
                assert rows == {
                    (5, None, everyone.id, 1),
                    (5, None, everyone.id, None),
                    (3, None, everyone.id, None),
                    (2, users["bob"], None, bobs),
                }
                carol = Principal(user_id=users["carol"], username="carol")
                held = grants.of(carol, s)
                # Reads and creates everywhere, changes only its own (no CHANGE_OTHERS), creates
                # workspaces; bob administers his workspace, others' objects there included.
                assert held.workspaces_with(Permission.VIEW_EXPERIMENT_METADATA) is None
                assert held.has(Permission.CREATE_EXPERIMENT, bobs)
                assert held.has(Permission.CREATE_WORKSPACE, None)
                assert not access.may_change(carol, Permission.UPDATE_EXPERIMENT, bobs, [users["bob"]], s)
                assert access.may_change(carol, Permission.UPDATE_EXPERIMENT, 1, [users["carol"]], s)
                bob_p = Principal(user_id=users["bob"], username="bob")
                assert access.may_change(bob_p, Permission.UPDATE_EXPERIMENT, bobs, [users["carol"]], s)
                assert not access.may_change(bob_p, Permission.UPDATE_EXPERIMENT, 1, [users["carol"]], s)
        finally:
            db.dispose()

"""Tasks run as the Linux account their owner or workspace is linked to (Determined's
agent_user_group): admins link users and workspaces, all four fields together, checked before
anything is stored; a task's start names its workspace's link where it has one, else its owner's,
else none (the agent's task user)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from sqlalchemy import select

from services.common.principal import Principal
from services.master.domain.experiments import creation
from services.master.domain.identity import agent_users, users
from services.master.domain.identity.agent_users import AgentUserGroup, AgentUserGroupRequest
from services.master.domain.identity.auth import AuthService
from services.master.domain.kernel.errors import InvalidArgument, PermissionDenied
from services.master.domain.kernel.states import TaskKind
from services.master.domain.task_kinds.model_definition import ContextFile
from services.master.domain.tasks import tasks
from services.master.domain.workspaces import workspaces
from services.master.store import models
from tests.unit.master.domain.harness import Master, config_text

ALICE = AgentUserGroupRequest(uid=1500, gid=1600, user="alice", group="lab")
LAB = AgentUserGroupRequest(uid=2500, gid=2600, user="labshare", group="nfs-lab")
FILES = [ContextFile(path="train.py", type=ord("0"), content=b"print('hi')\n", mtime=0, mode=0o644)]


def _link_user(
    master: Master, principal: Principal, user_id: int, request: AgentUserGroupRequest, **kw: Any
) -> Any:
    changes = users.UserChanges(agent_user_group=request)
    return users.patch(master.db, AuthService(master.db, 3600), principal, user_id, changes, **kw)


def _stored_link(master: Master, user_id: int) -> AgentUserGroup | None:
    with master.db.read() as s:
        return agent_users.of_row(s.get_one(models.User, user_id))


def _workspace(master: Master, principal: Principal, name: str, link: AgentUserGroupRequest | None) -> int:
    with master.ctx.unit_of_work() as w:
        settings = workspaces.WorkspaceSettings(agent_user_group=link)
        return workspaces.create_workspace(master.ctx, w, principal, name, settings)


def _project(master: Master, workspace_id: int) -> int:
    with master.ctx.unit_of_work() as w:
        return int(workspaces.create_project(w, master.admin, workspace_id, "P", None, None))


def _command(master: Master, principal: Principal, workspace_id: int | None = None) -> Any:
    """The start the agent is sent for a command of `principal` (in `workspace_id`)."""
    request = tasks.TaskRequest(
        kind=TaskKind.COMMAND, config={"entrypoint": ["id"]}, files=FILES, workspace_id=workspace_id
    )
    task_id = tasks.create(master.ctx, principal, request)
    master.settle()
    with master.db.read() as s:
        allocation_id = s.scalar(select(models.Allocation.id).where(models.Allocation.task_id == task_id))
    (start,) = [c for _, c in master.hub.commands("start") if c.allocation_id == allocation_id]
    return start


def _trial_start(master: Master, principal: Principal, project_id: int) -> Any:
    before = len(master.hub.commands("start"))
    request = creation.CreateRequest(
        config_text=config_text(searcher={"name": "single", "metric": "loss", "max_length": 1}),
        files=FILES,
        activate=True,
        validate_only=False,
        project_id=project_id,
    )
    creation.create(master.ctx, principal, request)
    master.settle()
    (start,) = [c for _, c in master.hub.commands("start")[before:]]
    return start


def _run_as(start: Any) -> tuple[int, int, str, str] | None:
    if not start.spec.HasField("run_as"):
        return None
    r = start.spec.run_as
    return (r.uid, r.gid, r.user, r.group)


def test_an_admin_links_a_user_and_the_link_is_shown_and_removable(master: Master) -> None:
    bob = master.add_user("bob")
    assert bob.user_id is not None
    info = _link_user(master, master.admin, bob.user_id, ALICE)
    assert info.agent_user_group == AgentUserGroup(1500, 1600, "alice", "lab")
    assert users.get(master.db, bob.user_id).agent_user_group == info.agent_user_group
    # Every field unset: the link goes (the user's tasks run as the task user again).
    _link_user(master, master.admin, bob.user_id, AgentUserGroupRequest())
    assert _stored_link(master, bob.user_id) is None


@pytest.mark.parametrize(
    ("request_", "match"),
    [
        (AgentUserGroupRequest(uid=1500, gid=1600, user="alice"), "missing agentGroup"),
        (AgentUserGroupRequest(uid=1500), "missing agentGid, agentUser, agentGroup"),
        (AgentUserGroupRequest(uid=-1, gid=1600, user="alice", group="lab"), "agentUid: must be between 0"),
        (AgentUserGroupRequest(uid=1500, gid=2**31, user="alice", group="lab"), "agentGid: must be between"),
        (
            AgentUserGroupRequest(uid=1500, gid=1600, user="evil:x:0:0", group="lab"),
            "agentUser: a Linux name",
        ),
        (AgentUserGroupRequest(uid=1500, gid=1600, user="alice", group="-lab"), "agentGroup: a Linux name"),
        (AgentUserGroupRequest(uid=1500, gid=1600, user="a" * 33, group="lab"), "agentUser: a Linux name"),
        (AgentUserGroupRequest(uid=1500, gid=1600, user="alice", group="a\nb"), "agentGroup: a Linux name"),
        (AgentUserGroupRequest(uid=0, gid=0, user="root", group="root"), "agentUid: 0 is root"),
    ],
)
def test_a_bad_link_is_refused_naming_the_field_and_changes_nothing(
    master: Master, request_: AgentUserGroupRequest, match: str
) -> None:
    bob = master.add_user("bob")
    assert bob.user_id is not None
    _link_user(master, master.admin, bob.user_id, LAB)
    with pytest.raises(InvalidArgument, match=f"user.agentUserGroup.*{match}"):
        _link_user(master, master.admin, bob.user_id, request_)
    assert _stored_link(master, bob.user_id) == AgentUserGroup(2500, 2600, "labshare", "nfs-lab")


def test_root_is_linked_only_where_the_master_allows_it(master: Master) -> None:
    bob = master.add_user("bob")
    assert bob.user_id is not None
    root = AgentUserGroupRequest(uid=0, gid=0, user="root", group="root")
    info = _link_user(master, master.admin, bob.user_id, root, allow_root_agent_user=True)
    assert info.agent_user_group == AgentUserGroup(0, 0, "root", "root")
    # A workspace under the master's own setting (--allow-root-agent-user).
    master.ctx.settings = dataclasses.replace(master.ctx.settings, allow_root_agent_user=True)
    lab = _workspace(master, master.admin, "Lab", root)
    with master.db.read() as s:
        assert agent_users.of_row(s.get_one(models.Workspace, lab)) == AgentUserGroup(0, 0, "root", "root")


def test_only_an_admin_links_users_and_workspaces(master: Master) -> None:
    bob = master.add_user("bob")
    assert bob.user_id is not None
    with pytest.raises(PermissionDenied, match="only an admin may link a user"):
        _link_user(master, bob, bob.user_id, ALICE)  # not even themselves
    assert _stored_link(master, bob.user_id) is None
    with pytest.raises(PermissionDenied, match="agent user group"):
        _workspace(master, bob, "Mine", LAB)
    with master.db.read() as s:
        assert s.scalar(select(models.Workspace).where(models.Workspace.name == "Mine")) is None
    mine = _workspace(master, bob, "Mine", None)
    with pytest.raises(PermissionDenied, match="agent user group"), master.ctx.unit_of_work() as w:
        settings = workspaces.WorkspaceSettings(agent_user_group=LAB)
        workspaces.patch_workspace(master.ctx, w, bob, mine, None, settings)
    with master.db.read() as s:
        assert agent_users.of_row(s.get_one(models.Workspace, mine)) is None


def test_a_workspace_link_is_checked_stored_changed_and_removed(master: Master) -> None:
    with pytest.raises(InvalidArgument, match=r"agentUserGroup: .*missing agentUser, agentGroup"):
        _workspace(master, master.admin, "Half", AgentUserGroupRequest(uid=1, gid=1))
    with pytest.raises(InvalidArgument, match=r"agentUserGroup\.agentUid: 0 is root"):
        _workspace(
            master, master.admin, "Root", AgentUserGroupRequest(uid=0, gid=0, user="root", group="root")
        )
    lab = _workspace(master, master.admin, "Lab", LAB)

    def link() -> AgentUserGroup | None:
        with master.db.read() as s:
            return agent_users.of_row(s.get_one(models.Workspace, lab))

    assert link() == AgentUserGroup(2500, 2600, "labshare", "nfs-lab")
    with master.ctx.unit_of_work() as w:  # a rename leaves the link as it is
        workspaces.patch_workspace(master.ctx, w, master.admin, lab, "Lab2", workspaces.WorkspaceSettings())
    assert link() == AgentUserGroup(2500, 2600, "labshare", "nfs-lab")
    with master.ctx.unit_of_work() as w:
        settings = workspaces.WorkspaceSettings(agent_user_group=ALICE)
        workspaces.patch_workspace(master.ctx, w, master.admin, lab, None, settings)
    assert link() == AgentUserGroup(1500, 1600, "alice", "lab")
    with master.ctx.unit_of_work() as w:
        settings = workspaces.WorkspaceSettings(agent_user_group=AgentUserGroupRequest())
        workspaces.patch_workspace(master.ctx, w, master.admin, lab, None, settings)
    assert link() is None


def test_the_workspace_link_wins_over_the_owners_and_no_link_runs_as_the_task_user(master: Master) -> None:
    master.add_agent("a1", slots=8)
    bob = master.add_user("bob")
    carol = master.add_user("carol")
    assert bob.user_id is not None
    _link_user(master, master.admin, bob.user_id, ALICE)
    lab = _workspace(master, master.admin, "Lab", LAB)
    plain = _workspace(master, master.admin, "Plain", None)

    # Commands (every task kind shares this launch): the owner's link, the workspace's over it.
    assert _run_as(_command(master, bob)) == (1500, 1600, "alice", "lab")
    assert _run_as(_command(master, bob, plain)) == (1500, 1600, "alice", "lab")
    assert _run_as(_command(master, bob, lab)) == (2500, 2600, "labshare", "nfs-lab")
    assert _run_as(_command(master, carol, lab)) == (2500, 2600, "labshare", "nfs-lab")
    assert _run_as(_command(master, carol)) is None  # the agent's task user, as before

    # Trials: the experiment's project's workspace, else its owner.
    assert _run_as(_trial_start(master, bob, _project(master, lab))) == (2500, 2600, "labshare", "nfs-lab")
    assert _run_as(_trial_start(master, bob, _project(master, plain))) == (1500, 1600, "alice", "lab")
    assert _run_as(_trial_start(master, carol, 1)) is None


def test_the_resolution_rule() -> None:
    owner, workspace = AgentUserGroup(1, 1, "a", "a"), AgentUserGroup(2, 2, "b", "b")
    assert agent_users.for_task(owner, workspace) == workspace
    assert agent_users.for_task(owner, None) == owner
    assert agent_users.for_task(None, workspace) == workspace
    assert agent_users.for_task(None, None) is None

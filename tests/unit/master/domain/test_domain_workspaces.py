"""Workspaces and projects: the immutable built-ins, names and keys unique as clients look them up,
who may change what, which project a new experiment goes to (with its workspace's defaults),
moving experiments, and deleting a project or workspace with its experiments. Every refusal is
checked to have changed nothing."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import func, select

from services.common.principal import Principal
from services.master.domain.deletion import workspace_deletion
from services.master.domain.experiments import creation, experiment_projects, experiments
from services.master.domain.identity.agent_users import AgentUserGroupRequest
from services.master.domain.kernel.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
)
from services.master.domain.kernel.states import TaskKind
from services.master.domain.reads import tasks as task_reads
from services.master.domain.reads import workspaces as reads
from services.master.domain.reads.listings import ExperimentFilter, experiment_rows_by_id, list_experiment_ids
from services.master.domain.task_kinds.model_definition import ContextFile
from services.master.domain.tasks import tasks
from services.master.domain.workspaces import workspaces
from services.master.store import models
from tests.unit.master.domain.harness import Master, config_text

# On each database: names unique as clients spell them (lower(), unique keys), and deleting what
# holds experiments.
pytestmark = pytest.mark.on_each_database

NO_SETTINGS = workspaces.WorkspaceSettings()


def _user(master: Master, username: str) -> Principal:
    with master.db.read() as s:
        user = s.scalar(select(models.User).where(models.User.username == username))
        assert user is not None
        return Principal(user_id=user.id, username=user.username, admin=user.admin)


def _snapshot(master: Master) -> list[Any]:
    """Every workspace, project and experiment placement, to show a refusal changed nothing."""
    with master.db.read() as s:
        return [
            [(w.id, w.name, w.archived, w.state, w.user_id) for w in s.scalars(select(models.Workspace))],
            [
                (p.id, p.name, p.key, p.description, p.archived, p.state, p.notes)
                for p in s.scalars(select(models.Project))
            ],
            list(s.execute(select(models.Experiment.id, models.Experiment.project_id)).all()),
        ]


def _refused(master: Master, error: type[Exception], match: str, action: Callable[[], Any]) -> None:
    before = _snapshot(master)
    with pytest.raises(error, match=match):
        action()
    assert _snapshot(master) == before


def _in_unit(master: Master, action: Callable[..., Any], *args: Any) -> Any:
    with master.ctx.unit_of_work() as w:
        return action(w, *args)


def _workspace(master: Master, principal: Principal, name: str, settings: Any = NO_SETTINGS) -> int:
    with master.ctx.unit_of_work() as w:
        return workspaces.create_workspace(master.ctx, w, principal, name, settings)


def _project(
    master: Master, principal: Principal, workspace_id: int, name: str, key: str | None = None
) -> int:
    return int(_in_unit(master, workspaces.create_project, principal, workspace_id, name, None, key))


def _create(master: Master, principal: Principal, *, project_id: int = 0, **config: Any) -> int:
    request = creation.CreateRequest(
        config_text=config_text(**config),
        files=[ContextFile(path="train.py", type=ord("0"), content=b"print('hi')\n", mtime=0, mode=0o644)],
        activate=True,
        validate_only=False,
        project_id=project_id,
    )
    created = creation.create(master.ctx, principal, request)
    assert created.experiment_id is not None
    return created.experiment_id


def _kill(master: Master, experiment_id: int) -> None:
    with master.ctx.unit_of_work() as w:
        experiments.kill(master.ctx, w, experiments.load(w, experiment_id))
    master.settle()
    assert master.experiment(experiment_id).state == "CANCELED"


def test_the_builtins_belong_to_the_first_admin_and_never_change(master: Master) -> None:
    with master.ctx.unit_of_work() as w:  # as on a fresh database, where migration 0006 found no admin
        w.session.get_one(models.Workspace, 1).user_id = None
        w.session.get_one(models.Project, 1).user_id = None
    workspaces.ensure_builtin_owner(master.ctx)
    with master.db.read() as s:
        assert s.get_one(models.Workspace, 1).user_id == master.admin.user_id
        assert s.get_one(models.Project, 1).user_id == master.admin.user_id
        assert reads.workspace_row(s, 1).username == "admin"

    admin = master.admin
    rename = workspaces.WorkspaceSettings()
    _refused(
        master,
        FailedPrecondition,
        "built in",
        lambda: _in_unit(
            master, lambda w: workspaces.patch_workspace(master.ctx, w, admin, 1, "Mine", rename)
        ),
    )
    _refused(
        master,
        FailedPrecondition,
        "built in",
        lambda: _in_unit(master, workspaces.set_workspace_archived, admin, 1, True),
    )
    _refused(
        master,
        FailedPrecondition,
        "built in",
        lambda: workspace_deletion.delete_workspace(master.ctx, admin, 1),
    )
    _refused(master, FailedPrecondition, "takes no new projects", lambda: _project(master, admin, 1, "extra"))
    edit = workspaces.ProjectEdit(name="Renamed")
    _refused(
        master,
        FailedPrecondition,
        "built in",
        lambda: _in_unit(master, workspaces.patch_project, admin, 1, edit),
    )
    _refused(
        master,
        FailedPrecondition,
        "built in",
        lambda: _in_unit(master, workspaces.set_project_archived, admin, 1, True),
    )
    _refused(
        master,
        FailedPrecondition,
        "built in",
        lambda: workspace_deletion.delete_project(master.ctx, admin, 1),
    )

    # An experiment that names no project lands in the built-in one.
    experiment_id = master.create()
    assert master.experiment(experiment_id).project_id == 1


def test_names_are_unique_as_clients_look_them_up_and_keys_as_determined_makes_them(master: Master) -> None:
    admin = master.admin
    vision = _workspace(master, admin, "Vision")
    _refused(master, AlreadyExists, "a workspace named 'Vision'", lambda: _workspace(master, admin, "vision"))
    _refused(master, InvalidArgument, "name: must not be empty", lambda: _workspace(master, admin, "  "))
    _refused(master, InvalidArgument, "name: at most 80", lambda: _workspace(master, admin, "x" * 81))
    storage = workspaces.WorkspaceSettings(checkpoint_storage={"type": "shared_fs"})
    _refused(
        master, InvalidArgument, "checkpointStorageConfig", lambda: _workspace(master, admin, "S", storage)
    )
    half_link = workspaces.WorkspaceSettings(agent_user_group=AgentUserGroupRequest(uid=1500))
    _refused(master, InvalidArgument, "agentUserGroup", lambda: _workspace(master, admin, "U", half_link))
    pool = workspaces.WorkspaceSettings(default_compute_pool="nowhere")
    _refused(
        master,
        InvalidArgument,
        "defaultComputePool: no resource pool 'nowhere'",
        lambda: _workspace(master, admin, "P", pool),
    )

    detection = _project(master, admin, vision, "Detection-2d")
    _refused(
        master,
        AlreadyExists,
        "already has a project named 'Detection-2d'",
        lambda: _project(master, admin, vision, "DETECTION-2D"),
    )
    other = _workspace(master, admin, "Speech")
    assert _project(master, admin, other, "Detection-2d")  # the same name in another workspace is fine

    with master.db.read() as s:
        generated = s.get_one(models.Project, detection).key
    assert len(generated) == 5 and generated.startswith("DET") and generated.isalnum() and generated.isupper()
    explicit = _project(master, admin, vision, "Segmentation", key="seg1")
    with master.db.read() as s:
        assert s.get_one(models.Project, explicit).key == "SEG1"
    _refused(
        master,
        AlreadyExists,
        "key SEG1 is already in use",
        lambda: _project(master, admin, other, "S2", key="Seg1"),
    )
    _refused(
        master, InvalidArgument, "letters and digits", lambda: _project(master, admin, other, "S3", key="a-b")
    )
    _refused(
        master, InvalidArgument, "longer than 5", lambda: _project(master, admin, other, "S4", key="ABCDEF")
    )
    clash = workspaces.ProjectEdit(name="segmentation")
    _refused(
        master,
        AlreadyExists,
        "already has a project",
        lambda: _in_unit(master, workspaces.patch_project, admin, detection, clash),
    )

    # Look-ups by name ignore case, as Determined's clients expect (its `name` filter is an ILIKE).
    with master.db.read() as s:
        rows, page = reads.list_workspaces(
            s, reads.WorkspaceFilter(name="VISION"), sort="id", descending=False, offset=0, limit=0
        )
        assert [r.workspace.id for r in rows] == [vision] and page.total == 1
        found, _ = reads.list_projects(
            s,
            reads.ProjectFilter(workspace_id=vision, name="detection-2D"),
            sort="id",
            descending=False,
            offset=0,
            limit=0,
        )
        assert [p.project.id for p in found] == [detection]


def test_owners_and_admins_change_things_and_others_are_refused(master: Master) -> None:
    admin, someone = master.admin, _user(master, "determined")
    theirs = _workspace(master, admin, "Admins")
    project = _project(master, admin, theirs, "Shared")
    rename = workspaces.ProjectEdit(name="Taken over")
    _refused(
        master,
        PermissionDenied,
        r"only its owner or an admin \(ClusterAdmin, or WorkspaceAdmin of workspace",
        lambda: _in_unit(master, workspaces.patch_project, someone, project, rename),
    )
    _refused(
        master,
        PermissionDenied,
        "only its owner",
        lambda: _in_unit(master, workspaces.set_project_archived, someone, project, True),
    )
    _refused(
        master,
        PermissionDenied,
        "only its owner",
        lambda: workspace_deletion.delete_project(master.ctx, someone, project),
    )
    # A project's notes are anyone's to write, as Determined's basic authorization has it.
    shared = _in_unit(master, workspaces.put_project_notes, someone, project, [("n", "c")])
    assert shared == [{"name": "n", "contents": "c"}]
    added_note = _in_unit(master, workspaces.add_project_note, someone, project, "m", "d")
    assert added_note == [{"name": "n", "contents": "c"}, {"name": "m", "contents": "d"}]
    # The built-in project: a user who may not change it hears so (403) before hearing it is built in.
    _refused(
        master,
        PermissionDenied,
        "only its owner",
        lambda: _in_unit(master, workspaces.set_project_archived, someone, 1, True),
    )
    _refused(
        master,
        PermissionDenied,
        "only its owner or an admin",
        lambda: _in_unit(master, workspaces.set_workspace_archived, someone, theirs, True),
    )
    _refused(
        master,
        PermissionDenied,
        "may not delete workspace .*: it takes 'delete workspace' on workspace",
        lambda: workspace_deletion.delete_workspace(master.ctx, someone, theirs),
    )

    # Anyone may add a project to a workspace; the workspace's owner may change it.
    added = _project(master, someone, theirs, "Theirs")
    _in_unit(
        master,
        workspaces.patch_project,
        admin,
        added,
        workspaces.ProjectEdit(description="reviewed", key="rev"),
    )
    notes = _in_unit(master, workspaces.put_project_notes, someone, added, [("plan", "train")])
    assert notes == [{"name": "plan", "contents": "train"}]
    with master.db.read() as s:
        row = reads.project_row(s, added)
    assert (row.project.description, row.project.key, row.username, row.workspace_name) == (
        "reviewed",
        "REV",
        "determined",
        "Admins",
    )


def test_new_experiments_go_where_the_request_or_config_says_and_take_the_workspace_defaults(
    master: Master,
) -> None:
    admin, someone = master.admin, _user(master, "determined")
    storage = {"type": "shared_fs", "host_path": "/srv/team-checkpoints", "save_trial_best": 2}
    team = _workspace(
        master,
        admin,
        "Team",
        workspaces.WorkspaceSettings(checkpoint_storage=storage, default_compute_pool="default"),
    )
    project = _project(master, admin, team, "Baselines")

    by_id = _create(master, someone, project_id=project)  # anyone may create in any project that takes them
    by_keys = _create(master, someone, workspace="Team", project="Baselines")
    for experiment_id in (by_id, by_keys):
        exp = master.experiment(experiment_id)
        assert exp.project_id == project
        assert exp.config["checkpoint_storage"]["host_path"] == "/srv/team-checkpoints"
        assert exp.config["checkpoint_storage"]["save_trial_best"] == 2
    own_storage = _create(
        master, someone, project_id=project, checkpoint_storage={"type": "shared_fs", "host_path": "/mine"}
    )
    assert master.experiment(own_storage).config["checkpoint_storage"]["host_path"] == "/mine"
    assert (
        master.experiment(master.create()).config["checkpoint_storage"]["host_path"]
        != "/srv/team-checkpoints"
    )

    # What the listings show and filter on.
    with master.db.read() as s:
        (row,) = experiment_rows_by_id(s, [by_id])
        ids, page = list_experiment_ids(
            s, ExperimentFilter(project_id=project), sort="id", descending=False, offset=0, limit=0
        )
        counted = reads.project_row(s, project)
    assert row.place is not None
    assert (row.place.project_name, row.place.workspace_id, row.place.workspace_name) == (
        "Baselines",
        team,
        "Team",
    )
    assert ids == [by_id, by_keys, own_storage] and page.total == 3
    assert (counted.num_experiments, counted.num_active_experiments, counted.num_runs) == (3, 3, 3)

    _refused(
        master,
        InvalidArgument,
        "name both the workspace and the project",
        lambda: _create(master, someone, workspace="Team"),
    )
    _refused(
        master,
        NotFound,
        "no project 'Nope' in workspace 'Team'",
        lambda: _create(master, someone, workspace="Team", project="Nope"),
    )
    _refused(
        master,
        NotFound,
        "project_id: project 999 not found",
        lambda: _create(master, someone, project_id=999),
    )
    _in_unit(master, workspaces.set_project_archived, admin, project, True)
    _refused(
        master,
        FailedPrecondition,
        re.escape(f"project_id: project ({project}) is archived and cannot add new experiments."),
        lambda: _create(master, someone, project_id=project),
    )
    _refused(
        master,
        FailedPrecondition,
        "workspace, project: project is archived and cannot add new experiments",
        lambda: _create(master, someone, workspace="Team", project="Baselines"),
    )
    _in_unit(master, workspaces.set_project_archived, admin, project, False)
    _in_unit(master, workspaces.set_workspace_archived, admin, team, True)
    _refused(
        master,
        FailedPrecondition,
        re.escape(f"project_id: project ({project}) is archived and cannot add new experiments."),
        lambda: _create(master, someone, project_id=project),
    )
    _refused(
        master,
        FailedPrecondition,
        "workspace, project: workspace is archived and cannot add new experiments",
        lambda: _create(master, someone, workspace="Team", project="Baselines"),
    )
    with master.db.read() as s:
        assert reads.project_row(s, project).archived  # shown archived with its workspace
        assert experiment_rows_by_id(s, [by_id])[0].place.parent_archived  # type: ignore[union-attr]


def test_moving_an_experiment(master: Master) -> None:
    admin, someone = master.admin, _user(master, "determined")
    team = _workspace(master, someone, "Team")
    source, target = _project(master, someone, team, "Source"), _project(master, someone, team, "Target")
    mine = _create(master, someone, project_id=source)
    admins = _create(master, admin, project_id=source)

    def move(principal: Principal, experiment_id: int, project_id: int) -> None:
        with master.ctx.unit_of_work() as w:
            experiment_projects.move_experiment(master.ctx, w, principal, experiment_id, project_id)

    move(someone, mine, target)
    assert master.experiment(mine).project_id == target
    # Another user's experiment takes WorkspaceAdmin there: its creator administers the workspace.
    other = master.add_user("other")
    _refused(master, PermissionDenied, "only its owner or an admin", lambda: move(other, admins, target))
    move(someone, admins, target)
    move(admin, admins, 1)  # into the built-in project: it takes experiments
    assert master.experiment(admins).project_id == 1
    _refused(
        master, NotFound, "destinationProjectId: project 999 not found", lambda: move(someone, mine, 999)
    )
    _in_unit(master, workspaces.set_project_archived, someone, source, True)
    _refused(
        master,
        FailedPrecondition,
        "is archived and cannot add new experiments",
        lambda: move(someone, mine, source),
    )
    _kill(master, mine)
    with master.ctx.unit_of_work() as w:
        experiments.set_archived(w, experiments.load(w, mine), True)
    _refused(master, FailedPrecondition, "is archived: unarchive it", lambda: move(someone, mine, 1))


def test_deleting_a_project_or_workspace_deletes_its_finished_experiments(master: Master) -> None:
    someone = _user(master, "determined")
    team = _workspace(master, someone, "Team")
    first, second = _project(master, someone, team, "First"), _project(master, someone, team, "Second")
    running = _create(master, someone, project_id=first)
    done = _create(master, someone, project_id=second)
    _kill(master, done)
    # An experiment that moved away before (with its trial tasks) stays when its old project goes.
    moved = _create(master, someone, project_id=second)
    _kill(master, moved)
    elsewhere = _project(master, someone, team, "Elsewhere")
    _in_unit(master, lambda w: experiment_projects.move_experiment(master.ctx, w, someone, moved, elsewhere))

    # A running experiment holds its project and workspace back; the refusal changes nothing.
    _refused(
        master,
        FailedPrecondition,
        rf"not finished \({running}\)",
        lambda: workspace_deletion.delete_project(master.ctx, someone, first),
    )
    _refused(
        master,
        FailedPrecondition,
        rf"not finished \({running}\)",
        lambda: workspace_deletion.delete_workspace(master.ctx, someone, team),
    )

    assert workspace_deletion.delete_project(master.ctx, someone, second) is False  # owed, for later
    assert _count(master, models.Project, second) == 1
    master.run_deferred()  # the experiment's deletion, then the project's
    assert _count(master, models.Project, second) == 0
    assert _count(master, models.Experiment, done) == 0 and _count(master, models.Experiment, moved) == 1

    _kill(master, running)
    empty = _project(master, someone, team, "Empty")
    assert workspace_deletion.delete_project(master.ctx, someone, empty) is True  # nothing to wait for
    assert workspace_deletion.delete_workspace(master.ctx, someone, team) is False
    master.run_deferred()
    assert _count(master, models.Workspace, team) == 0
    assert _count(master, models.Project, first) == 0 and _count(master, models.Experiment, running) == 0


def _count(master: Master, table: Any, row_id: Any) -> int:
    with master.db.read() as s:
        return int(s.scalar(select(func.count()).select_from(table).where(table.id == row_id)) or 0)


def test_deleting_a_workspace_kills_its_tasks_and_keeps_them_readable(master: Master) -> None:
    """As Determined's test_workspace_delete_notebook: the workspace's running notebook (and a
    command of one of its projects) are killed by the deletion, which never trips over them; a task
    of another workspace runs on, and a launch into the archived or deleted workspace is a 404."""
    master.add_agent("a1")
    someone = _user(master, "determined")
    team, other = _workspace(master, someone, "Team"), _workspace(master, someone, "Other")
    project = _project(master, someone, team, "Notebooks")

    def launch(kind: TaskKind, workspace_id: int, project_id: int | None = None) -> str:
        request = tasks.TaskRequest(
            kind=kind,
            config={"entrypoint": ["sleep", "1000"]} if kind == TaskKind.COMMAND else {},
            workspace_id=workspace_id,
            project_id=project_id,
        )
        task_id = tasks.create(master.ctx, someone, request)
        master.settle()
        return task_id

    notebook = launch(TaskKind.NOTEBOOK, team)
    command = launch(TaskKind.COMMAND, team, project)
    outside = launch(TaskKind.NOTEBOOK, other)

    assert workspace_deletion.delete_workspace(master.ctx, someone, team) is True
    master.settle()
    assert _count(master, models.Workspace, team) == 0 and _count(master, models.Project, project) == 0
    with master.db.read() as s:
        killed = {
            t.id: t for t in s.scalars(select(models.Task).where(models.Task.id.in_([notebook, command])))
        }
        assert {t.state for t in killed.values()} <= {"STOPPING_CANCELED", "CANCELED"}
        assert {(t.workspace_id, t.project_id) for t in killed.values()} == {(None, None)}
        assert s.get_one(models.Task, outside).state == "ACTIVE"

        # Listing the notebooks of the workspace that is gone is a 404, as on Determined.
        with pytest.raises(NotFound, match=re.escape(f"workspace '{team}' not found")):
            task_reads.task_page(s, TaskKind.NOTEBOOK, workspace_id=team)
        assert [r.task.id for r in task_reads.task_page(s, TaskKind.NOTEBOOK, workspace_id=other)[0]] == [
            outside
        ]
        # Nor is it listed by default any more (Determined's test: "not returned ... by default").
        assert [r.task.id for r in task_reads.task_page(s, TaskKind.NOTEBOOK)[0]] == [outside]
        assert task_reads.task_row(s, notebook, TaskKind.NOTEBOOK).task.id == notebook

    # Launching into a workspace that is gone, or archived, answers as Determined does (404).
    _refused(
        master, NotFound, re.escape(f"workspace '{team}' not found"), lambda: launch(TaskKind.COMMAND, team)
    )
    _in_unit(master, workspaces.set_workspace_archived, someone, other, True)
    _refused(
        master, NotFound, re.escape(f"workspace '{other}' not found"), lambda: launch(TaskKind.SHELL, other)
    )
    _in_unit(master, workspaces.set_workspace_archived, someone, other, False)
    with master.ctx.unit_of_work() as w:
        tasks.kill(master.ctx, w, tasks.load(w, outside))
    master.settle()
    assert workspace_deletion.delete_workspace(master.ctx, someone, other) is True

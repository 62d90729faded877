"""What a user without a role on a workspace sees of it through the REST API: nothing of its
experiments, trials, tasks, models, projects, templates or logs in any listing, count or search,
and each of them, asked for by id, is not found; a Viewer of the workspace sees them all
(reads/visibility.py filters in SQL, so on each database)."""

from __future__ import annotations

from typing import Any

import pytest

from services.master.domain.checkpoints import model_registry
from services.master.domain.experiments import templates
from services.master.domain.identity import groups, role_assignments, roles, users
from services.master.domain.identity.role_assignments import Assignment, Requested
from services.master.domain.kernel.states import TaskKind
from services.master.domain.tasks import tasks
from services.master.domain.workspaces import workspaces
from tests.unit.master.domain.harness import Master
from tests.unit.master.rest_in_process import RestApi

pytestmark = pytest.mark.on_each_database


def _ids(answer: Any, key: str, field: str = "id") -> list[Any]:
    assert answer.status == 200, answer
    return [item[field] for item in answer.body.get(key) or []]


def test_a_user_without_roles_sees_nothing_of_a_workspace_and_a_viewer_sees_it(master: Master) -> None:
    ctx, admin = master.ctx, master.admin
    api = RestApi(master)
    for name in ("loner", "viewer"):
        users.create(master.db, admin, users.UserChanges(username=name), f"Pw-{name}-1", False)
    # No default roles: the loner holds none at all; the viewer is a Viewer of the team's workspace.
    (everyone,) = groups.listing(master.db, groups.GroupQuery(name="everyone"))[0]
    groups.delete_group(ctx, admin, everyone.id)
    with ctx.unit_of_work() as w:
        team = workspaces.create_workspace(ctx, w, admin, "team", workspaces.WorkspaceSettings())
        project = workspaces.create_project(w, admin, team, "vision", None, None)
        model_registry.create_model(ctx, w, admin, model_registry.NewModel(name="resnet", workspace_id=team))
        templates.create(ctx, w, admin, "base", {"description": "x"}, workspace_id=team)
    viewer_id = users.get_by_username(master.db, "viewer").id
    role_assignments.assign(
        ctx,
        admin,
        [
            Requested(
                Assignment(roles.VIEWER.id, user_id=viewer_id, workspace_id=team), "userRoleAssignments[0]"
            )
        ],
    )
    experiment = master.create(workspace="team", project="vision", labels=["secret"])
    (trial,) = master.trials(experiment)
    command = tasks.create(
        ctx,
        admin,
        tasks.TaskRequest(kind=TaskKind.COMMAND, config={"entrypoint": ["true"]}, workspace_id=team),
    )

    def seen(token: str) -> dict[str, Any]:
        get = lambda path: api.call("GET", path, token=token)  # noqa: E731
        post = lambda path, body: api.call("POST", path, body, token=token)  # noqa: E731
        listed = get("/api/v1/experiments")
        return {
            "experiments": _ids(listed, "experiments"),
            "experiment count": listed.body["pagination"]["total"],
            "search": _ids(post("/api/v1/experiments-search", {"limit": 10}), "experiments", "experiment"),
            "runs": _ids(post("/api/v1/runs", {"limit": 10}), "runs"),
            "labels": get("/api/v1/experiment/labels").body.get("labels") or [],
            "commands": _ids(get("/api/v1/commands"), "commands"),
            "tasks": sorted(get("/tasks").body or {}),
            "jobs": _ids(get("/api/v1/job-queues-v2"), "jobs", "full"),
            "models": _ids(get("/api/v1/models"), "models", "name"),
            "workspaces": _ids(get("/api/v1/workspaces"), "workspaces", "name"),
            "templates": _ids(get("/api/v1/templates"), "templates", "name"),
            "groups of the projects": get(f"/api/v1/workspaces/{team}/projects").status,
            "experiment": get(f"/api/v1/experiments/{experiment}").status,
            "trial": get(f"/api/v1/trials/{trial.id}").status,
            "trials of the experiment": get(f"/api/v1/experiments/{experiment}/trials").status,
            "project": get(f"/api/v1/projects/{project}").status,
            "workspace": get(f"/api/v1/workspaces/{team}").status,
            "model": get("/api/v1/models/resnet").status,
            "template": get("/api/v1/templates/base").status,
            "command": get(f"/api/v1/commands/{command}").status,
            "task": get(f"/api/v1/tasks/{command}").status,
        }

    loner = seen(api.login("loner", "Pw-loner-1"))
    assert loner == {
        "experiments": [],
        "experiment count": 0,
        "search": [],
        "runs": [],
        "labels": [],
        "commands": [],
        "tasks": [],
        "jobs": [],
        "models": [],
        "workspaces": [],
        "templates": [],
        "groups of the projects": 404,
        "experiment": 404,
        "trial": 404,
        "trials of the experiment": 404,
        "project": 404,
        "workspace": 404,
        "model": 404,
        "template": 404,
        "command": 404,
        "task": 404,
    }
    viewer = seen(api.login("viewer", "Pw-viewer-1"))
    assert viewer["experiments"] == [experiment] and viewer["experiment count"] == 1
    assert [e["id"] for e in viewer["search"]] == [experiment] and viewer["runs"] == [trial.id]
    assert viewer["labels"] == ["secret"] and viewer["commands"] == [command]
    assert viewer["models"] == ["resnet"] and viewer["workspaces"] == ["team"]
    assert viewer["templates"] == ["base"]
    assert len(viewer["jobs"]) == 2 and len(viewer["tasks"]) == 2
    assert {k: v for k, v in viewer.items() if isinstance(v, int) and v >= 200} == dict.fromkeys(
        [k for k, v in loner.items() if v == 404], 200
    )

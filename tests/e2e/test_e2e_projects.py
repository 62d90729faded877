"""Workspaces and projects with the stock determined==0.38.1 client (CLI and SDK): creating them,
creating experiments into a project (`--project_id` and the config's `workspace`/`project` keys),
`det project describe`, `det experiment move` and listings filtered by project, the SDK's
workspace and project calls, refusals for another user's things and for the built-ins, and
deleting a project with its experiments. Every check reads the end state back: `det` exits 0
after many failures."""

from __future__ import annotations

import json
from pathlib import Path

import grpc

from cairn.api.v1 import experiment_pb2
from cairn.api.v1 import workspace_pb2 as wpb
from tests.e2e.determined_client import det_runner, determined_env, sdk_runner
from tests.e2e.helpers import cairn_cli, experiment, wait_state
from tests.support.cluster import TestCluster

DET_TRIAL_DIR = Path(__file__).parent / "fixtures" / "det_trial"


def trial_config(tmp_path: Path, name: str, extra: str = "") -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"""
name: {name}
entrypoint: python3 det_core_trial.py
hyperparameters: {{steps: 3, step_s: 0.05, increment_by: 1}}
searcher: {{name: single, metric: x, smaller_is_better: false, max_length: {{batches: 3}}}}
max_restarts: 0
{extra}
"""
    )
    return str(path)


def ids_in_project(api, project_id: int) -> list[int]:  # type: ignore[no-untyped-def]
    response = api.GetExperiments(experiment_pb2.GetExperimentsRequest(project_id=project_id))
    return [e.id for e in response.experiments]


def project(api, project_id: int) -> wpb.Project:  # type: ignore[no-untyped-def]
    return api.GetProject(wpb.GetProjectRequest(id=project_id)).project


def test_workspaces_projects_and_moving_experiments(cluster: TestCluster, det, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    api = cluster.login()
    admin = det_runner(determined_env(cluster, tmp_path / "admin-home"), user="admin")
    sdk = sdk_runner(determined_env(cluster, tmp_path / "sdk-home"))

    # ---- create with the CLI; names are unique (without regard to case) ----
    det("workspace", "create", "Vision")
    det("project", "create", "Vision", "Detection", "--description", "boxes")
    det("project", "create", "Vision", "Segmentation", "--key", "seg")
    refused = det("workspace", "create", "vision", check=False)
    assert "already exists" in refused
    workspaces = json.loads(det("workspace", "list", "--json"))
    assert [(w["id"], w["name"], w["numProjects"]) for w in workspaces] == [
        (1, "Uncategorized", 1),
        (2, "Vision", 2),
    ]
    assert (
        workspaces[0]["username"] == "admin" and workspaces[0]["immutable"]
    )  # the built-in, owned by the admin
    assert json.loads(det("workspace", "describe", "Vision", "--json"))["username"] == "determined"
    projects = {p["name"]: p for p in json.loads(det("project", "list", "Vision", "--json"))}
    assert projects["Detection"]["description"] == "boxes" and projects["Segmentation"]["workspaceId"] == 2
    keys = {
        name: json.loads(det("project", "describe", "Vision", name, "--json"))["key"] for name in projects
    }
    assert (
        keys["Segmentation"] == "SEG" and len(keys["Detection"]) == 5 and keys["Detection"].startswith("DET")
    )
    detection, segmentation = projects["Detection"]["id"], projects["Segmentation"]["id"]

    # ---- experiments go to the project the request or the config names ----
    assert "Created experiment 1" in det(
        "experiment",
        "create",
        "--project_id",
        str(detection),
        trial_config(tmp_path, "in-detection"),
        str(DET_TRIAL_DIR),
    )
    named_in_config = trial_config(tmp_path, "by-keys", "workspace: Vision\nproject: Segmentation")
    assert "Created experiment 2" in det("experiment", "create", named_in_config, str(DET_TRIAL_DIR))
    assert "Created experiment 3" in det(
        "experiment", "create", trial_config(tmp_path, "nowhere"), str(DET_TRIAL_DIR)
    )
    first, second, third = experiment(api, 1), experiment(api, 2), experiment(api, 3)
    assert (first.project_id, first.project_name, first.workspace_id, first.workspace_name) == (
        detection, "Detection", 2, "Vision",
    )  # fmt: skip
    assert (second.project_id, third.project_id, third.workspace_name) == (segmentation, 1, "Uncategorized")
    described = det("project", "describe", "Vision", "Detection")
    assert "in-detection" in described and "by-keys" not in described
    assert [
        e["id"] for e in json.loads(det("project", "list-experiments", "Vision", "Detection", "--json"))
    ] == [1]
    for experiment_id in (1, 2, 3):
        wait_state(api, experiment_id, "COMPLETED")

    # ---- det experiment move: listings filtered by project show it in its new place only ----
    det("experiment", "move", "1", "Vision", "Segmentation")
    assert ids_in_project(api, detection) == [] and ids_in_project(api, segmentation) == [1, 2]
    assert project(api, segmentation).num_experiments == 2 and project(api, detection).num_experiments == 0
    with_projects = det("experiment", "list", "--show_project")
    assert "Segmentation" in with_projects and "Uncategorized" in with_projects

    # ---- the SDK's workspace and project calls ----
    result = sdk(
        """
ws = client.create_workspace("Speech")
asr = ws.create_project("ASR", description="speech to text")
asr.add_note("plan", "train a baseline")
found = client.get_workspace("speech")
exp = client.get_experiment(2)
exp.move_to_project("Speech", "ASR")
asr.reload()
result = [found.id == ws.id, [p.name for p in found.list_projects()], asr.n_experiments, asr.notes,
          exp.project_id == asr.id, [e.id for e in asr.list_experiments()], asr.description]
"""
    )
    assert result == [
        True,
        ["ASR"],
        1,
        [{"name": "plan", "contents": "train a baseline"}],
        True,
        [2],
        "speech to text",
    ]
    assert ids_in_project(api, segmentation) == [1]

    # ---- the same with Cairn's own CLI ----
    cairn = cairn_cli(cluster, tmp_path / "cairn-home")
    cairn("workspace", "create", "Audio")
    cairn("project", "create", "Audio", "Music", "--key", "mus", "--description", "songs")
    cairn("experiment", "move", "3", "audio", "music")  # names match without regard to case
    shown = json.loads(cairn("project", "describe", "Audio", "Music", "--json"))
    assert (shown["project"]["key"], shown["project"]["description"]) == ("MUS", "songs")
    assert [e["id"] for e in shown["experiments"]] == [3] and experiment(api, 3).project_name == "Music"
    music = str(shown["project"]["id"])
    listed_ids = [
        e["id"]
        for e in json.loads(cairn("experiment", "list", "--project-id", music, "--json"))["experiments"]
    ]
    assert listed_ids == [3]
    listed = json.loads(cairn("workspace", "describe", "Audio", "--json"))
    assert [p["name"] for p in listed["projects"]] == ["Music"]
    assert "no project named 'Nope'" in cairn("experiment", "move", "3", "Audio", "Nope", check=False)

    # ---- another user's workspace, project and experiment are refused, and stay as they were ----
    admin("workspace", "create", "Research")
    admin("project", "create", "Research", "Private")
    private = json.loads(admin("project", "list", "Research", "--json"))[0]["id"]
    assert "Created experiment 4" in admin(
        "experiment",
        "create",
        "--project_id",
        str(private),
        trial_config(tmp_path, "admins"),
        str(DET_TRIAL_DIR),
    )
    denied = det("project", "edit", "Research", "Private", "--new_name", "Mine", check=False)
    assert "only its owner" in denied
    det("project", "archive", "Research", "Private", check=False)
    det("workspace", "delete", "Research", "--yes", check=False)
    assert "only its owner or an admin" in det("experiment", "move", "4", "Vision", "Detection", check=False)
    kept = project(api, private)
    assert (kept.name, kept.archived, experiment(api, 4).project_id) == ("Private", False, private)

    # ---- the built-ins are never renamed or archived ----
    assert "built in" in admin("workspace", "edit", "Uncategorized", "--name", "Mine", check=False)
    assert "built in" in admin("project", "archive", "Uncategorized", "Uncategorized", check=False)
    builtin = project(api, 1)
    assert (builtin.name, builtin.workspace_name, builtin.archived) == (
        "Uncategorized",
        "Uncategorized",
        False,
    )

    # ---- an archived project takes no new experiments ----
    det("project", "archive", "Vision", "Detection")
    assert project(api, detection).archived
    late = trial_config(tmp_path, "late")
    refused = det(
        "experiment", "create", "--project_id", str(detection), late, str(DET_TRIAL_DIR), check=False
    )
    assert "archived" in refused and ids_in_project(api, detection) == []

    # ---- deleting a project deletes its experiments (det waits until it is gone) ----
    det("project", "delete", "Vision", "Segmentation", "--yes")

    def gone(call) -> bool:  # type: ignore[no-untyped-def]
        try:
            call()
        except grpc.RpcError as exc:
            return exc.code() == grpc.StatusCode.NOT_FOUND
        return False

    assert gone(lambda: project(api, segmentation)) and gone(lambda: experiment(api, 1))
    assert experiment(api, 2).project_name == "ASR"  # moved away before: it stays
    assert [p["name"] for p in json.loads(det("project", "list", "Vision", "--json"))] == ["Detection"]

"""Workspaces as Determined has them, driven with the stock client (determined==0.38.1) on a cluster
of one agent and one slot, after Determined's own e2e tests (test_workspace_org.py):
deleting a workspace that holds a running notebook is a clean deletion that kills the notebook
(and only it), a launch into an archived workspace is a 404, and a user who does not own a workspace
may still create a project and an experiment in it and write its project's notes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.determined_client import det_runner, determined_env, sdk_runner
from tests.support.cluster import TestCluster, running_cluster

SESSION = "client._determined._session"


@pytest.fixture
def cluster(db_url: str | None, tmp_path: Path) -> Iterator[TestCluster]:
    """One agent with one slot, as Determined's own suite runs."""
    with running_cluster(tmp_path / "cluster", db_url, agents=1, slots=1) as c:
        yield c


def test_deleting_a_workspace_with_a_notebook_kills_it_and_archived_ones_take_no_launch(
    cluster: TestCluster, tmp_path: Path
) -> None:
    sdk = sdk_runner(determined_env(cluster, tmp_path / "home"), "admin")
    ended = sdk(
        f"""
import time, uuid
from determined.common.api import errors
s = {SESSION}
TERMINATING = (bindings.taskv1State.TERMINATED, bindings.taskv1State.TERMINATING)
def workspace():
    body = bindings.v1PostWorkspaceRequest(name="ws_" + uuid.uuid4().hex[:8])
    return bindings.post_PostWorkspace(s, body=body).workspace
def zero_slot_notebook(workspace_id):
    body = bindings.v1LaunchNotebookRequest(workspaceId=workspace_id, config={{"resources": {{"slots": 0}}}})
    return bindings.post_LaunchNotebook(s, body=body).notebook
doomed, kept = workspace(), workspace()
inside, outside = zero_slot_notebook(doomed.id), zero_slot_notebook(kept.id)
listed = [n.id for n in bindings.get_GetNotebooks(s, workspaceId=doomed.id).notebooks]
bindings.delete_DeleteWorkspace(s, id=doomed.id)
deadline = time.monotonic() + 120
while bindings.get_GetNotebook(s, notebookId=inside.id).notebook.state not in TERMINATING:
    assert time.monotonic() < deadline, "the deleted workspace's notebook did not stop"
    time.sleep(1)
outside_state = bindings.get_GetNotebook(s, notebookId=outside.id).notebook.state
by_default = [n.id for n in bindings.get_GetNotebooks(s).notebooks]
try:
    bindings.get_GetNotebooks(s, workspaceId=doomed.id)
    gone = None
except errors.APIException as e:
    gone = e.status_code
workspaces = [w.id for w in bindings.get_GetWorkspaces(s).workspaces]
bindings.post_ArchiveWorkspace(s, id=kept.id)
try:
    bindings.post_LaunchNotebook(s, body=bindings.v1LaunchNotebookRequest(workspaceId=kept.id))
    archived = None
except errors.APIException as e:
    archived = e.status_code
bindings.post_UnarchiveWorkspace(s, id=kept.id)
bindings.post_KillNotebook(s, notebookId=outside.id)
while bindings.get_GetNotebook(s, notebookId=outside.id).notebook.state not in TERMINATING:
    assert time.monotonic() < deadline, "the kept workspace's notebook did not stop"
    time.sleep(1)
bindings.delete_DeleteWorkspace(s, id=kept.id)
result = [inside.id in listed, outside_state.value, gone, doomed.id in workspaces, archived,
          inside.id in by_default, outside.id in by_default]
"""
    )
    assert ended[0] is True  # listed in its workspace before the deletion
    assert ended[1] not in ("STATE_TERMINATED", "STATE_TERMINATING")  # the other workspace's runs on
    assert ended[2] == 404 and ended[3] is False  # the workspace is gone, and its listing with it
    assert ended[4] == 404  # a launch into an archived workspace, as Determined answers it
    assert ended[5:] == [False, True]  # the deleted workspace's notebook is listed no more


def test_a_non_owner_creates_in_someone_elses_workspace(cluster: TestCluster, tmp_path: Path) -> None:
    env = determined_env(cluster, tmp_path / "home")
    admin = sdk_runner(env, "admin")
    workspace_id = admin(
        f"result = bindings.post_PostWorkspace({SESSION}, "
        "body=bindings.v1PostWorkspaceRequest(name='admins-team')).workspace.id"
    )
    det = det_runner(env)  # "determined", not an admin and not the workspace's owner
    det("project", "create", "admins-team", "theirs")
    config = tmp_path / "noop.yaml"
    config.write_text(
        "name: in-their-workspace\nentrypoint: python3 -c 'print(1)'\nmax_restarts: 0\n"
        "workspace: admins-team\nproject: theirs\n"
        "searcher: {name: single, metric: x, max_length: {batches: 1}}\n"
    )
    context = tmp_path / "context"
    context.mkdir()
    (context / "noop.py").write_text("print(1)\n")
    experiment_id = int(det("experiment", "create", str(config), str(context)).split()[-1])
    sdk = sdk_runner(env)
    ended = sdk(
        f"""
s = {SESSION}
(project,) = bindings.get_GetWorkspaceProjects(s, id={workspace_id}).projects
exp = client.get_experiment({experiment_id})
state = exp.wait(interval=1)
note = bindings.v1Note(name="plan", contents="train")
notes = bindings.post_AddProjectNote(s, body=note, projectId=project.id).notes
put = bindings.put_PutProjectNotes(
    s, body=bindings.v1PutProjectNotesRequest(notes=[], projectId=project.id), projectId=project.id
).notes
result = [project.name, project.username, state.value, exp.project_id == project.id,
          [(n.name, n.contents) for n in notes], len(put)]
"""
    )
    assert ended == ["theirs", "determined", "STATE_COMPLETED", True, [["plan", "train"]], 0]
    # Cleaned up as Determined's tests do: the workspace's owner deletes it, experiments and all.
    admin(f"bindings.delete_DeleteWorkspace({SESSION}, id={workspace_id})")
    det("workspace", "list")

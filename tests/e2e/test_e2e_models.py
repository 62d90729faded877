"""The model registry with the stock determined==0.38.1 client: `det model create|list|describe|
register-version|list-versions|delete`, the SDK's create_model / get_model / register_version /
get_versions (a version's checkpoint downloads), archive; and the registry's promise: a registered
checkpoint outlives its experiment's garbage collection and refuses deletion. Every check reads the
end state back (Cairn's API, a second command): `det` exits 0 after many failures."""

from __future__ import annotations

import json
from pathlib import Path

import grpc

from cairn.api.v1 import checkpoint_pb2, model_pb2
from tests.e2e.determined_client import det_runner, determined_env, sdk_runner
from tests.e2e.helpers import cairn_cli, experiment, logs, trials, wait_state
from tests.support.cluster import AuthedStub, TestCluster
from tests.support.polling import wait_for

DET_TRIAL_DIR = Path(__file__).parent / "fixtures" / "det_trial"


def det_config(tmp_path: Path, steps: int) -> Path:
    path = tmp_path / "registry.yaml"
    path.write_text(
        f"""
name: registry
entrypoint: python3 det_core_trial.py
hyperparameters:
  steps: {steps}
  step_s: 0.05
  increment_by: 2
searcher:
  name: single
  metric: x
  smaller_is_better: false
  max_length: {{batches: {steps}}}
max_restarts: 0
"""
    )
    return path


def checkpoint_exists(api: AuthedStub, uuid: str) -> bool:
    """Neither gone with its experiment nor DELETED (GC, a deletion: the row stays, as on Determined)."""
    try:
        got = api.GetCheckpoint(checkpoint_pb2.GetCheckpointRequest(checkpoint_uuid=uuid))
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.NOT_FOUND:
            return False
        raise
    return got.checkpoint.state != checkpoint_pb2.Checkpoint.STATE_DELETED


def registered(api: AuthedStub, model: str) -> list[tuple[int, str]]:
    response = api.GetModelVersions(model_pb2.GetModelVersionsRequest(model_name=model))
    return [(v.version, v.checkpoint.uuid) for v in response.model_versions]


def model_names(det) -> list[str]:  # type: ignore[no-untyped-def]
    return sorted(m["name"] for m in json.loads(det("model", "list", "--json")))


def test_model_registry_with_the_stock_client(cluster: TestCluster, tmp_path: Path) -> None:
    api = cluster.login()
    env = determined_env(cluster, tmp_path / "home")
    det = det_runner(env)
    admin = det_runner(env, "admin")
    sdk = sdk_runner(env)

    # Checkpoints at steps 3, 6 and 9; the experiment's GC (best 1, latest 1) keeps 6 and 9.
    det("experiment", "create", str(det_config(tmp_path, 9)), str(DET_TRIAL_DIR))
    wait_state(api, 1, "COMPLETED")
    (trial,) = trials(api, 1)
    at_3, at_6, at_9 = [line.split()[-1] for line in logs(api, trial.id) if "DET-CHECKPOINT" in line]
    wait_for(lambda: not checkpoint_exists(api, at_3), timeout=60, what="the experiment's GC")

    # Create with the CLI and the SDK; refused names create nothing.
    det("model", "create", "mnist cnn", "--description", "digits")
    created = sdk(
        """
client.create_model("resnet", description="r", metadata={"team": "vision"}).set_labels(["prod"])
m = client.get_model("resnet")
result = [m.name, m.description, m.metadata, m.labels, m.username, m.workspace_id, m.archived]
"""
    )
    assert created == ["resnet", "r", {"team": "vision"}, ["prod"], "determined", 1, False]
    assert "only numbers" in det("model", "create", "12345", check=False)
    assert "already exists" in det("model", "create", "RESNET", check=False)
    assert "slashes" in det("model", "create", "a/b", check=False)
    assert model_names(det) == ["mnist cnn", "resnet"]

    # Versions 1 and 2: by the CLI, then by the SDK; a missing checkpoint is refused.
    det("model", "register-version", "mnist cnn", at_6)
    version = sdk(
        f"""
v = client.get_model("mnist cnn").register_version({at_9!r})
result = [v.model_version, v.checkpoint.uuid, v.model_name]
"""
    )
    assert version == [2, at_9, "mnist cnn"]
    sdk('v = client.get_model("mnist cnn").get_version(1); v.set_name("first"); v.set_notes("# v1")')
    first = api.GetModelVersion(model_pb2.GetModelVersionRequest(model_name="mnist cnn", model_version_num=1))
    assert (first.model_version.name, first.model_version.notes) == ("first", "# v1")
    labels = sdk("result = bindings.get_GetModelLabels(client._determined._session).labels")
    assert labels == ["prod"]
    assert "not found" in det("model", "register-version", "mnist cnn", "no-such-checkpoint", check=False)
    assert registered(api, "mnist cnn") == [(1, at_6), (2, at_9)]
    listed = det("model", "list-versions", "mnist cnn")
    assert at_6 in listed and at_9 in listed
    # --json asks by the model's id.
    as_json = json.loads(det("model", "list-versions", "mnist cnn", "--json"))
    assert [v["checkpoint"]["uuid"] for v in as_json["modelVersions"]] == [at_6, at_9]
    described = det("model", "describe", "mnist cnn")
    assert "digits" in described and at_9 in described  # the latest version
    assert json.loads(det("model", "describe", "mnist cnn", "--json"))["name"] == "mnist cnn"

    # The SDK's versions, newest first, with checkpoints that work: the files download.
    download_dir = tmp_path / "download"
    got = sdk(
        f"""
import pathlib
versions = client.get_model("mnist cnn").get_versions()
path = versions[-1].checkpoint.download({str(download_dir)!r})
result = [[v.model_version, v.checkpoint.uuid] for v in versions]
result.append(json.loads(pathlib.Path(path, "state").read_text()))
"""
    )
    assert got == [[2, at_9], [1, at_6], {"x": 12.0, "steps": 6}]

    # Another user's model: no deleting it.
    admin("model", "create", "admins")
    assert "belongs to another user" in det("model", "delete", "admins", check=False)
    assert model_names(det) == ["admins", "mnist cnn", "resnet"]

    # A registered checkpoint refuses deletion, and so does its experiment.
    refusal = sdk(
        f"""
try:
    client.get_checkpoint({at_6!r}).delete()
    result = "deleted"
except Exception as exc:
    result = str(exc)
"""
    )
    assert "'mnist cnn' version 1" in refusal
    assert checkpoint_exists(api, at_6)
    assert "delete those model versions first" in det("experiment", "delete", "1", "--yes", check=False)
    assert experiment(api, 1).state == experiment(api, 1).STATE_COMPLETED

    # GC under a policy that keeps nothing: version 2 deleted first, so 9 goes and 6 stays.
    sdk('client.get_model("mnist cnn").get_version(2).delete()')
    assert registered(api, "mnist cnn") == [(1, at_6)]
    det(
        "experiment", "set", "gc-policy", "1", "--yes",
        "--save-experiment-best", "0", "--save-trial-best", "0", "--save-trial-latest", "0",
    )  # fmt: skip
    wait_for(lambda: not checkpoint_exists(api, at_9), timeout=60, what="GC under the new policy")
    kept = sdk(
        f"""
import pathlib
path = client.get_checkpoint({at_6!r}).download({str(tmp_path / "after-gc")!r})
result = json.loads(pathlib.Path(path, "state").read_text())
"""
    )
    assert kept == {"x": 12.0, "steps": 6}

    # Archived: listed as such, and it takes no new versions until unarchived.
    sdk('client.get_model("mnist cnn").archive()')
    archived = {m["name"]: m["archived"] for m in json.loads(det("model", "list", "--json"))}
    assert archived == {"admins": False, "mnist cnn": True, "resnet": False}
    assert "archived" in det("model", "register-version", "mnist cnn", at_6, check=False)
    assert registered(api, "mnist cnn") == [(1, at_6)]

    # Cairn's CLI works on the same registry.
    cairn = cairn_cli(cluster, tmp_path / "cairn-config")
    cairn("model", "unarchive", "mnist cnn")
    assert not api.GetModel(model_pb2.GetModelRequest(model_name="mnist cnn")).model.archived
    assert "mnist cnn" in cairn("model", "list") and at_6 in cairn("model", "describe", "mnist cnn")

    # Deleting the model frees its checkpoint: the experiment may go now.
    det("model", "delete", "mnist cnn")
    assert model_names(det) == ["admins", "resnet"]
    det("experiment", "delete", "1", "--yes")
    wait_for(lambda: not checkpoint_exists(api, at_6), timeout=60, what="experiment 1 deleted")

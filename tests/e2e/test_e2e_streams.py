"""Determined's streaming updates with the stock determined==0.38.1 client: a master started with
`feature_switches: [streaming_updates]`, the client's own streaming code (determined.common.streams,
as Determined's e2e tests drive it, tests/e2e/fixtures/stream_watch/watch.py) subscribed to a
workspace's projects and models, and model versions of a model, while `det` changes them: it sees
the sync, an upsert after each create, edit and registration, a deletion after each delete and
after a model moves out of the workspace, and nothing of the other workspace. Without the switch,
`/stream` is answered 404, as on Determined where it is not a route."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.determined_client import TASK_ENV_BIN, det_runner, determined_env
from tests.e2e.helpers import logs, trials, wait_state
from tests.support.cluster import TestCluster, running_cluster

WATCH = Path(__file__).parent / "fixtures" / "stream_watch" / "watch.py"
DET_TRIAL_DIR = Path(__file__).parent / "fixtures" / "det_trial"
EVENT_TIMEOUT_S = 60.0


@pytest.fixture
def streaming_cluster(db_url: str | None, tmp_path: Path) -> Iterator[TestCluster]:
    config = tmp_path / "master.yaml"
    config.write_text("feature_switches: [streaming_updates]\n")
    with running_cluster(tmp_path / "cluster", db_url, extra_env={"CAIRN_MASTER_CONFIG": str(config)}) as c:
        yield c


class Watcher:
    """The stock client's stream in a process of its own; its events as they come."""

    def __init__(self, env: dict[str, str], spec: dict[str, Any]) -> None:
        self._process = subprocess.Popen(
            [str(TASK_ENV_BIN / "python"), str(WATCH), env["DET_MASTER"], "determined", json.dumps(spec)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        assert self.next() == {"subscribed": True}

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def next(self) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=EVENT_TIMEOUT_S)
        except queue.Empty:
            raise AssertionError(f"the stream sent nothing in {EVENT_TIMEOUT_S:g} s") from None
        if line is None:
            err = self._process.stderr.read() if self._process.stderr else ""
            raise AssertionError(f"the stock client's stream ended: {err}")
        event: dict[str, Any] = json.loads(line)
        return event

    def sync(self) -> list[dict[str, Any]]:
        """The first sync's messages, between its two markers."""
        assert self.next() == {"sync_id": "s1", "complete": False}
        synced = []
        while (event := self.next()) != {"sync_id": "s1", "complete": True}:
            synced.append(event)
        return synced

    def close(self) -> None:
        self._process.kill()
        self._process.wait(timeout=30)


def _id(det: Callable[..., str], *args: str) -> int:
    found: int = json.loads(det(*args, "--json"))["id"]
    return found


def test_the_stock_client_streams_projects_models_and_versions(
    streaming_cluster: TestCluster, tmp_path: Path
) -> None:
    env = determined_env(streaming_cluster, tmp_path / "home")
    det = det_runner(env)
    det("workspace", "create", "vision")
    det("workspace", "create", "audio")
    vision = _id(det, "workspace", "describe", "vision")
    audio = _id(det, "workspace", "describe", "audio")
    det("project", "create", "vision", "detection")
    detection = _id(det, "project", "describe", "vision", "detection")
    det("model", "create", "mnist", "-w", "vision")

    watcher = Watcher(env, {"projects": {"workspace_id": vision}, "models": {"workspace_id": vision}})
    try:
        # The sync: what the workspace holds, nothing of the other one.
        synced = watcher.sync()
        assert sorted((e["type"], e["name"]) for e in synced) == [
            ("ModelMsg", "mnist"),
            ("ProjectMsg", "detection"),
        ]
        (project,) = [e for e in synced if e["type"] == "ProjectMsg"]
        assert (
            project["id"] == detection
            and project["workspace_id"] == vision
            and project["state"] == "UNSPECIFIED"
        )
        (model,) = [e for e in synced if e["type"] == "ModelMsg"]

        # Creating in the other workspace sends nothing; creating in this one, an upsert.
        det("project", "create", "audio", "speech")
        det("project", "create", "vision", "segmentation", "--description", "masks")
        created = watcher.next()
        assert created["type"] == "ProjectMsg" and created["name"] == "segmentation"
        assert created["description"] == "masks" and created["workspace_id"] == vision
        segmentation = created["id"]

        det("project", "edit", "vision", "segmentation", "--new_name", "masks")
        edited = watcher.next()
        assert (edited["id"], edited["name"]) == (segmentation, "masks") and edited["seq"] > created["seq"]

        det("project", "delete", "vision", "masks", "--yes")
        assert watcher.next() == {"type": "ProjectsDeleted", "keys": str(segmentation)}

        # A model moved to the other workspace leaves this subscription: a deletion.
        det("model", "move", "mnist", "-w", "audio")
        assert watcher.next() == {"type": "ModelsDeleted", "keys": str(model["id"])}
        det("model", "create", "resnet", "-w", "vision")
        resnet = watcher.next()
        assert (
            resnet["type"] == "ModelMsg" and resnet["name"] == "resnet" and resnet["workspace_id"] == vision
        )
    finally:
        watcher.close()
    assert audio != vision

    # Model versions of a model, as Determined's test_subscribe_model_version subscribes.
    det("experiment", "create", str(_experiment(tmp_path)), str(DET_TRIAL_DIR))
    api = streaming_cluster.login()
    wait_state(api, 1, "COMPLETED")
    (trial,) = trials(api, 1)
    checkpoint = next(line.split()[-1] for line in logs(api, trial.id) if "DET-CHECKPOINT" in line)
    versions = Watcher(env, {"model_versions": {"model_id": resnet["id"]}})
    try:
        assert versions.sync() == []
        det("model", "register-version", "resnet", checkpoint)
        version = versions.next()
        assert version["type"] == "ModelVersionMsg" and version["model_id"] == resnet["id"]
        assert version["checkpoint_uuid"] == checkpoint and version["version"] == 1
        assert version["workspace_id"] == str(vision)
    finally:
        versions.close()


def _experiment(tmp_path: Path) -> Path:
    path = tmp_path / "checkpointed.yaml"
    path.write_text(
        """
name: checkpointed
entrypoint: python3 det_core_trial.py
hyperparameters: {steps: 3, step_s: 0.05, increment_by: 1}
searcher: {name: single, metric: x, smaller_is_better: false, max_length: {batches: 3}}
max_restarts: 0
"""
    )
    return path


def test_without_the_switch_stream_is_not_a_route(cluster: TestCluster, tmp_path: Path) -> None:
    env = determined_env(cluster, tmp_path / "home")
    det_runner(env)  # logs the user in
    probed = subprocess.run(
        [str(TASK_ENV_BIN / "python"), str(WATCH), "--probe", env["DET_MASTER"], "determined"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert json.loads(probed.stdout) == {"rejected": 404}

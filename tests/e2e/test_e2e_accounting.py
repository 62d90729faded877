"""Allocation accounting, checkpoint file removal and an experiment's TensorBoard files with the
stock determined==0.38.1 client, on a cluster of one agent and one slot: `det resources
allocations|raw|aggregated` answer Determined's CSV (and JSON) with a row for each allocation that
ran; `det checkpoint rm` (with and without --glob) and the SDK's Checkpoint.remove_files take files
out of storage and the checkpoint follows; `det e delete-tb-files` deletes the experiment's
TensorBoard folder and leaves the experiment. Every check reads the end state back (files on disk,
Cairn's API): `det` exits 0 after many failures."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests

from cairn.api.v1 import checkpoint_pb2, master_pb2
from tests.e2e.determined_client import det_runner, determined_env, sdk_runner
from tests.e2e.helpers import experiment, logs, state, trials, wait_state
from tests.support.cluster import AuthedStub, TestCluster, running_cluster
from tests.support.polling import wait_for

DET_TRIAL_DIR = Path(__file__).parent / "fixtures" / "det_trial"


@pytest.fixture
def cluster(db_url: str | None, tmp_path: Path) -> Iterator[TestCluster]:
    """One agent with one slot, as Determined runs its own e2e clusters."""
    with running_cluster(tmp_path / "cluster", db_url, agents=1, slots=1) as c:
        yield c


def _experiment(det, tmp_path: Path, steps: int) -> int:  # type: ignore[no-untyped-def]
    path = tmp_path / "accounting.yaml"
    path.write_text(
        f"""
name: accounting
entrypoint: python3 det_core_trial.py
labels: [accounting, nightly]
hyperparameters: {{steps: {steps}, step_s: 0.05, increment_by: 2}}
searcher: {{name: single, metric: x, smaller_is_better: false, max_length: {{batches: {steps}}}}}
checkpoint_storage: {{save_trial_latest: 10}}
max_restarts: 0
"""
    )
    created = det("experiment", "create", str(path), str(DET_TRIAL_DIR))
    return int(created.split("Created experiment ")[1].split()[0])


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_allocation_accounting_with_the_stock_client(cluster: TestCluster, tmp_path: Path) -> None:
    api = cluster.login()
    det = det_runner(determined_env(cluster, tmp_path / "home"))
    started = datetime.now(UTC) - timedelta(seconds=2)

    exp = _experiment(det, tmp_path, steps=4)
    wait_state(api, exp, "COMPLETED")
    (trial,) = trials(api, exp)
    # The allocation the trial ran in, as its code was told (ClusterInfo.allocation_id).
    (info,) = [line for line in logs(api, trial.id) if line.startswith("DET-INFO")]
    trial_allocation = info.split("allocation=")[1].split()[0]
    det("command", "run", "echo", "accounted")
    (command,) = json.loads(det("command", "list", "--all", "--json"))
    until = datetime.now(UTC) + timedelta(minutes=1)
    after, before = _stamp(started), _stamp(until)

    # Determined's columns, one row per allocation that ran, oldest first.
    text = det("resources", "allocations", after, before)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert text.splitlines()[0] == (
        "allocation_id,task_type,username,workspace_name,experiment_id,slots,start_time,end_time,"
        "imagepulling_time,slot_hours,resource_pool"
    )
    assert [(r["allocation_id"], r["task_type"]) for r in rows] == [
        (trial_allocation, "TRIAL"),
        (f"{command['id']}.1", "COMMAND"),
    ]
    by_type = {r["task_type"]: r for r in rows}
    for row in rows:
        assert (row["username"], row["slots"], row["resource_pool"]) == ("determined", "1", "default")
        start = datetime.fromisoformat(row["start_time"])
        end = datetime.fromisoformat(row["end_time"])
        assert started <= start <= end <= until
        assert float(row["slot_hours"]) == pytest.approx((end - start).total_seconds() / 3600, abs=1e-5)
    assert int(by_type["TRIAL"]["experiment_id"]) == exp and by_type["COMMAND"]["experiment_id"] == "0"
    assert by_type["TRIAL"]["workspace_name"] == "Uncategorized"
    # A period that ended before anything ran has the header alone.
    earlier = _stamp(started - timedelta(hours=1))
    assert (
        det("resources", "allocations", earlier, _stamp(started - timedelta(minutes=30))).strip()
        == (text.splitlines()[0])
    )

    # The raw view, as JSON and as Determined's CSV.
    raw = json.loads(det("resources", "raw", "--json", after, before))["resourceEntries"]
    (trial_entry,) = [e for e in raw if e["experimentId"] == exp]
    assert (trial_entry["kind"], trial_entry["username"], trial_entry["slots"]) == ("TRIAL", "determined", 1)
    assert trial_entry["labels"] == ["accounting", "nightly"] and trial_entry["seconds"] > 0
    raw_csv = list(csv.DictReader(io.StringIO(det("resources", "raw", after, before))))
    assert {r["kind"] for r in raw_csv} == {"TRIAL", "COMMAND"}
    assert [r["labels"] for r in raw_csv if r["kind"] == "TRIAL"] == ["accounting,nightly"]

    # Aggregated by day and by month: slot-seconds by user, label and pool.
    today, month = started.strftime("%Y-%m-%d"), started.strftime("%Y-%m")
    first = until.strftime("%Y-%m-%d")
    (day,) = json.loads(det("resources", "aggregated", "--json", today, first))["resourceEntries"][:1]
    total = sum(float(r["slot_hours"]) for r in rows) * 3600
    # The CSV prints slot_hours to six decimals (as Determined's does): each row may be off by
    # half a millionth of an hour, 1.8 ms, from the exact seconds the aggregation sums.
    rounding = len(rows) * 0.5e-6 * 3600
    assert day["periodStart"] == today and day["period"] == "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_DAILY"
    assert day["seconds"] == pytest.approx(total, abs=rounding + 1e-6)
    assert day["byUsername"]["determined"] == day["seconds"]
    assert day["byExperimentLabel"]["accounting"] > 0 and day["byResourcePool"]["default"] == day["seconds"]
    monthly = list(csv.DictReader(io.StringIO(det("resources", "aggregated", "--monthly", month, month))))
    assert {(r["aggregation_type"], r["aggregation_key"]) for r in monthly} >= {
        ("username", "determined"),
        ("experiment_label", "nightly"),
        ("resource_pool", "default"),
        ("total", "total"),
    }

    # Bad input is refused naming the field.
    refused = det("resources", "allocations", "yesterday", before, check=False)
    assert "timestamp_after: 'yesterday' is not an RFC 3339 time" in refused
    refused = det("resources", "aggregated", "--json", first, "2000-01-01", check=False)
    assert "end_date: before start_date" in refused
    assert cluster.record is not None and cluster.record.master_http_url
    anonymous = requests.get(
        f"{cluster.record.master_http_url.rstrip('/')}/resources/allocation/allocations-csv",
        params={"timestamp_after": after, "timestamp_before": before},
        timeout=30,
    )
    assert anonymous.status_code == 401  # accounting is for signed-in users


def _exists(api: AuthedStub, uuid: str) -> bool:
    got = api.GetCheckpoint(checkpoint_pb2.GetCheckpointRequest(checkpoint_uuid=uuid))
    return got.checkpoint.state != checkpoint_pb2.Checkpoint.STATE_DELETED


def test_checkpoint_files_and_tensorboard_files_with_the_stock_client(
    cluster: TestCluster, tmp_path: Path
) -> None:
    api = cluster.login()
    env = determined_env(cluster, tmp_path / "home")
    det, sdk = det_runner(env), sdk_runner(env)
    cluster_id = cluster.raw_stub().GetMaster(master_pb2.GetMasterRequest(), timeout=10).cluster_id

    exp = _experiment(det, tmp_path, steps=6)
    wait_state(api, exp, "COMPLETED")
    (trial,) = trials(api, exp)
    at_3, at_6 = [line.split()[-1] for line in logs(api, trial.id) if "DET-CHECKPOINT" in line]
    host_path = Path(experiment(api, exp).config["checkpoint_storage"]["host_path"])
    assert (host_path / at_3 / "state").exists()

    # A file that reached storage outside the master: `det checkpoint rm` without globs reads the
    # checkpoint's files again and deletes nothing.
    (host_path / at_3 / "extra.bin").write_bytes(b"12345")
    det("checkpoint", "rm", at_3)
    wait_for(
        lambda: "extra.bin" in sdk(f"result = client.get_checkpoint({at_3!r}).resources"),
        timeout=60,
        what="the checkpoint's files read again",
    )
    assert (host_path / at_3 / "state").exists()

    # The SDK's remove_files: the matching file goes from storage, the checkpoint keeps the rest.
    sdk(f"client.get_checkpoint({at_3!r}).remove_files(['*.bin'])")
    got = sdk(f"c = client.get_checkpoint({at_3!r}); result = [c.state.value, sorted(c.resources)]")
    assert got[0] == "STATE_PARTIALLY_DELETED"
    assert "state" in got[1] and "extra.bin" not in got[1]
    assert not (host_path / at_3 / "extra.bin").exists() and (host_path / at_3 / "state").exists()

    # Bad globs are refused naming the field, and nothing goes.
    refused = det("checkpoint", "rm", at_6, "--glob", "../outside", "--yes", check=False)
    assert "checkpoint_globs[0]" in refused
    assert (host_path / at_6 / "state").exists()

    # Every file: the checkpoint is DELETED (read back as Determined's clients read it), its files
    # gone from storage.
    det("checkpoint", "rm", at_3, "--glob", "**/*", "--yes")
    wait_for(lambda: not _exists(api, at_3), timeout=60, what="the emptied checkpoint to be DELETED")
    assert sdk(f"result = client.get_checkpoint({at_3!r}).state.value") == "STATE_DELETED"
    assert not (host_path / at_3).exists() or not any((host_path / at_3).rglob("*"))
    assert _exists(api, at_6) and (host_path / at_6 / "state").exists()

    # The experiment's TensorBoard files go; the experiment and its other checkpoint stay.
    tb = host_path / cluster_id / "tensorboard" / "experiment" / str(exp)
    assert list(tb.rglob("*tfevents*")), "the trial wrote no TensorBoard files"
    det("experiment", "delete-tb-files", str(exp))
    wait_for(lambda: not tb.exists(), timeout=60, what="the TensorBoard files to be deleted")
    assert state(api, exp) == "COMPLETED"
    assert _exists(api, at_6) and (host_path / at_6 / "state").exists()
    sdk(f"client.get_experiment({exp}).delete_tensorboard_files()")  # again: nothing left, no error
    assert "not found" in det("experiment", "delete-tb-files", "424242", check=False)

    # The SDK's Checkpoint.delete(): DELETED by the time the call returns (the SDK reads it back at
    # once), its files gone; the experiment's listing of every state shows both, DELETED.
    got = sdk(
        f"client.get_checkpoint({at_6!r}).delete(); result = client.get_checkpoint({at_6!r}).state.value"
    )
    assert got == "STATE_DELETED" and not (host_path / at_6 / "state").exists()
    assert sdk(f"result = len(client.get_experiment({exp}).list_checkpoints())") == 0  # asks COMPLETED
    listed = api.GetExperimentCheckpoints(checkpoint_pb2.GetExperimentCheckpointsRequest(id=exp))
    assert [c.state for c in listed.checkpoints] == [checkpoint_pb2.Checkpoint.STATE_DELETED] * 2

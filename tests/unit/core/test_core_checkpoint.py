"""core.checkpoint on a cluster: files in shared_fs storage, metadata.json, what the master is told."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import grpc
import pytest
from google.protobuf import json_format

import cairn.core
from cairn.storage import CheckpointNotFound
from tests.unit.core.conftest import ClusterEnv


def _write_model(path: Path) -> None:
    (path / "model.bin").write_bytes(b"\x01" * 100)
    (path / "optim").mkdir()
    (path / "optim" / "state.json").write_text('{"lr": 0.1}')


def test_store_then_restore_round_trip(cluster_env: ClusterEnv) -> None:
    with cairn.core.init() as core:
        with core.checkpoint.store_path({"steps_completed": 40, "epoch": 2}) as (path, storage_id):
            _write_model(path)
        stored = cluster_env.checkpoint_dir / storage_id
        assert json.loads((stored / "metadata.json").read_text()) == {"epoch": 2, "steps_completed": 40}

        (request,) = cluster_env.master.calls.of("ReportCheckpoint")
        reported = request.checkpoint
        assert reported.uuid == storage_id
        assert reported.allocation_id == cluster_env.allocation_id
        assert reported.task_id == "7.3"
        assert reported.state == reported.STATE_COMPLETED
        assert dict(reported.resources) == {
            "metadata.json": (stored / "metadata.json").stat().st_size,
            "model.bin": 100,
            "optim/state.json": 11,
        }
        assert json_format.MessageToDict(reported.metadata) == {"steps_completed": 40.0, "epoch": 2.0}

        with core.checkpoint.restore_path(storage_id) as restored:
            assert (restored / "model.bin").read_bytes() == b"\x01" * 100
            assert (restored / "optim" / "state.json").read_text() == '{"lr": 0.1}'
        # Whole numbers come back as ints although the master's Struct holds doubles.
        metadata = core.checkpoint.get_metadata(storage_id)
        assert metadata == {"steps_completed": 40, "epoch": 2}
        assert isinstance(metadata["steps_completed"], int)


def test_exception_inside_store_path_reports_nothing_and_removes_files(cluster_env: ClusterEnv) -> None:
    with (
        cairn.core.init() as core,
        pytest.raises(RuntimeError, match="disk on fire"),
        core.checkpoint.store_path({"steps_completed": 1}) as (path, storage_id),
    ):
        _write_model(path)
        raise RuntimeError("disk on fire")
    assert not (cluster_env.checkpoint_dir / storage_id).exists()
    assert cluster_env.master.calls.of("ReportCheckpoint") == []


def test_metadata_must_say_how_far_training_got(cluster_env: ClusterEnv) -> None:
    with cairn.core.init() as core:
        with pytest.raises(ValueError, match="steps_completed"), core.checkpoint.store_path({"epoch": 1}):
            pass
        with pytest.raises(ValueError, match=r"metadata\['steps_completed'\]: must be >= 0"):
            core.checkpoint.upload(".", {"steps_completed": -5})
    assert cluster_env.master.calls.of("ReportCheckpoint") == []


def test_upload_download_and_selector(cluster_env: ClusterEnv, tmp_path: Path) -> None:
    source = tmp_path / "ckpt"
    source.mkdir()
    _write_model(source)
    with cairn.core.init() as core:
        storage_id = core.checkpoint.upload(
            source, {"steps_completed": 10}, selector=lambda path: not path.startswith("optim/")
        )
        target = tmp_path / "downloaded"
        core.checkpoint.download(storage_id, target)
    assert sorted(p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file()) == [
        "metadata.json",
        "model.bin",
    ]
    assert not (source / "metadata.json").exists(), "the caller's directory is left as it was"
    (request,) = cluster_env.master.calls.of("ReportCheckpoint")
    assert sorted(request.checkpoint.resources) == ["metadata.json", "model.bin"]


def test_delete_removes_files_then_tells_the_master(cluster_env: ClusterEnv) -> None:
    with cairn.core.init() as core:
        with core.checkpoint.store_path({"steps_completed": 5}) as (path, storage_id):
            _write_model(path)
        core.checkpoint.delete(storage_id)
        assert not (cluster_env.checkpoint_dir / storage_id).exists()
        (patch_request,) = cluster_env.master.calls.of("PatchCheckpoints")
        (patch,) = patch_request.checkpoints
        assert patch.uuid == storage_id
        assert patch.HasField("resources") and dict(patch.resources.resources) == {}
        with pytest.raises(cairn.core.MasterCallError, match="NOT_FOUND"):
            core.checkpoint.get_metadata(storage_id)
        with pytest.raises(CheckpointNotFound), core.checkpoint.restore_path(storage_id):
            pass


def test_partial_delete_reports_what_is_left(cluster_env: ClusterEnv) -> None:
    with cairn.core.init() as core:
        with core.checkpoint.store_path({"steps_completed": 5}) as (path, storage_id):
            _write_model(path)
        core.checkpoint.delete(storage_id, globs=["optim"])
    (patch_request,) = cluster_env.master.calls.of("PatchCheckpoints")
    assert sorted(patch_request.checkpoints[0].resources.resources) == ["metadata.json", "model.bin"]


def test_report_retried_through_a_lost_reply(cluster_env: ClusterEnv) -> None:
    cluster_env.master.fail("ReportCheckpoint", grpc.StatusCode.UNAVAILABLE, after_work=True)
    with cairn.core.init() as core, core.checkpoint.store_path({"steps_completed": 5}) as (path, storage_id):
        _write_model(path)
    assert len(cluster_env.master.calls.of("ReportCheckpoint")) == 2
    assert list(cluster_env.master.checkpoints) == [storage_id]


def test_refused_report_raises_and_keeps_files(cluster_env: ClusterEnv) -> None:
    cluster_env.master.fail("ReportCheckpoint", grpc.StatusCode.PERMISSION_DENIED)
    with (
        cairn.core.init() as core,
        pytest.raises(cairn.core.MasterCallError, match=r"ReportCheckpoint .*PERMISSION_DENIED"),
        core.checkpoint.store_path({"steps_completed": 5}) as (path, storage_id),
    ):
        _write_model(path)
    assert (cluster_env.checkpoint_dir / storage_id / "model.bin").exists()


def test_resume_from_latest_checkpoint(cluster_env: ClusterEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    with cairn.core.init() as core, core.checkpoint.store_path({"steps_completed": 40}) as (path, storage_id):
        (path / "state").write_text("40")
    monkeypatch.setenv("CAIRN_LATEST_CHECKPOINT", storage_id)
    with cairn.core.init() as core:
        assert core.info.latest_checkpoint == storage_id
        with core.checkpoint.restore_path(core.info.latest_checkpoint) as path:
            assert (path / "state").read_text() == "40"


def test_a_checkpoint_is_reported_only_after_the_metrics_before_it_are_stored(
    cluster_env: ClusterEnv,
) -> None:
    with cairn.core.init() as core:
        cluster_env.master.metrics_gate.clear()  # the master holds metric batches for now
        core.train.report_training_metrics(5, {"loss": 0.5})
        done = threading.Event()

        def checkpoint() -> None:
            with core.checkpoint.store_path({"steps_completed": 5}) as (path, _uuid):
                _write_model(path)
            done.set()

        thread = threading.Thread(target=checkpoint)
        thread.start()
        assert not done.wait(0.5)
        assert cluster_env.master.calls.of("ReportCheckpoint") == []
        cluster_env.master.metrics_gate.set()
        assert done.wait(10)
        thread.join()
        assert [r.steps_completed for r in cluster_env.master.stored_reports] == [5]
        assert len(cluster_env.master.calls.of("ReportCheckpoint")) == 1

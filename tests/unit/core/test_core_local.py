"""cairn.core.init() off cluster: the same script runs on a laptop."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

import cairn.core


def test_without_a_cluster_there_is_no_cluster_info() -> None:
    assert cairn.core.get_cluster_info() is None


def test_every_context_works_off_cluster(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="cairn.core")
    storage = tmp_path / "ckpts"
    with cairn.core.init(checkpoint_storage=str(storage), hparams={"lr": 0.5}, searcher_length=3) as core:
        assert core.info.on_cluster is False
        assert core.info.trial.hparams == {"lr": 0.5}
        assert core.info.latest_checkpoint is None
        assert core.distributed.size == 1
        steps = 0
        for op in core.searcher.operations():
            while steps < op.length:
                steps += 1
                core.train.report_training_metrics(steps, {"loss": 1.0 / steps})
                op.report_progress(steps)
                assert core.preempt.should_preempt() is False
            core.train.report_validation_metrics(steps, {"loss": 0.3})
            op.report_completed(0.3)
        core.train.report_progress(1.0)
        assert core.train.get_experiment_best_validation() is None
        with core.checkpoint.store_path({"steps_completed": steps}) as (path, storage_id):
            (path / "weights").write_text("w")
        with core.checkpoint.restore_path(storage_id) as restored:
            assert (restored / "weights").read_text() == "w"
        assert core.checkpoint.get_metadata(storage_id) == {"steps_completed": 3}
        core.checkpoint.delete(storage_id)
    assert steps == 3
    assert not (storage / storage_id).exists()
    assert "training metrics: steps_completed=3" in caplog.text
    assert "validation metrics: steps_completed=3" in caplog.text


def test_same_checks_as_on_the_cluster(tmp_path: Path) -> None:
    with cairn.core.init(checkpoint_storage=tmp_path) as core:
        with pytest.raises(RuntimeError, match="invalid scalar value: None"):
            core.train.report_validation_metrics(1, {"loss": None})
        with pytest.raises(ValueError, match="steps_completed"), core.checkpoint.store_path({}):
            pass


def test_default_checkpoint_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with cairn.core.init() as core, core.checkpoint.store_path({"steps_completed": 1}) as (_path, storage_id):
        pass
    default = tmp_path / "xdg-data" / "cairn" / "local-checkpoints" / storage_id
    assert json.loads((default / "metadata.json").read_text()) == {"steps_completed": 1}

    monkeypatch.setenv("CAIRN_LOCAL_CHECKPOINT_DIR", str(tmp_path / "elsewhere"))
    with cairn.core.init() as core, core.checkpoint.store_path({"steps_completed": 2}) as (_path, storage_id):
        pass
    assert (tmp_path / "elsewhere" / storage_id / "metadata.json").is_file()


def test_checkpoint_storage_as_a_dict(tmp_path: Path) -> None:
    section = {"type": "directory", "container_path": str(tmp_path / "dir")}
    with (
        cairn.core.init(checkpoint_storage=section) as core,
        core.checkpoint.store_path({"steps_completed": 1}) as (_path, storage_id),
    ):
        pass
    assert (tmp_path / "dir" / storage_id / "metadata.json").is_file()
    with pytest.raises(ValueError, match="gs:// storage is not supported"):
        cairn.core.init(checkpoint_storage="gs://bucket/prefix")


def test_searcher_length_from_environment_or_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("CAIRN_SEARCHER_LENGTH", "7")
    with cairn.core.init(checkpoint_storage=tmp_path) as core:
        op = next(iter(core.searcher.operations()))
        assert op.length == 7
        op.report_completed(0.0)
    monkeypatch.delenv("CAIRN_SEARCHER_LENGTH")
    lengths = []
    with (
        caplog.at_level(logging.WARNING, logger="cairn.core"),
        cairn.core.init(checkpoint_storage=tmp_path) as core,
    ):
        for op in core.searcher.operations():
            lengths.append(op.length)
            op.report_completed(0.0)
    assert lengths == [1]
    assert "no searcher length given off cluster" in caplog.text
    monkeypatch.setenv("CAIRN_SEARCHER_LENGTH", "many")
    with pytest.raises(ValueError, match="CAIRN_SEARCHER_LENGTH: must be an integer"):
        cairn.core.init(checkpoint_storage=tmp_path)


def test_invalid_hp_off_cluster_exits_zero(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exited, cairn.core.init(checkpoint_storage=tmp_path):
        raise cairn.core.InvalidHP()
    assert exited.value.code == 0

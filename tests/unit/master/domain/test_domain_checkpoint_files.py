"""Removing files from checkpoints (Determined's CheckpointsRemoveFiles) and an experiment's
TensorBoard files (DeleteTensorboardFiles), with the checkpoint service's own deletion code in
process on a real directory: the rows follow the files (part left: PARTIALLY_DELETED with what is
left; nothing left: DELETED, the row kept as Determined keeps it), a refresh reads the files again,
and bad requests are refused naming the field before any file goes."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from sqlalchemy import select

from cairn.tensorboard.layout import experiments_dir
from services.common.principal import Principal
from services.master.domain.checkpoints import checkpoints
from services.master.domain.kernel.errors import InvalidArgument, NotFound, PermissionDenied
from services.master.domain.tasks.tensorboard_files import TensorboardFiles
from services.master.store import models
from tests.unit.master.domain.harness import Master
from tests.unit.master.domain.test_domain_models import Trial


@pytest.fixture
def trial(master: Master, tmp_path: Path) -> Trial:
    return Trial(master, tmp_path / "storage")


def _with_files(trial: Trial, names: dict[str, str]) -> str:
    checkpoint_uuid = str(uuid.uuid4())
    with trial.files.store_path(checkpoint_uuid) as path:
        for name, text in names.items():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_text(text)
    checkpoints.report(
        trial.master.ctx,
        trial.master.admin,
        checkpoints.ReportedCheckpoint(
            uuid=checkpoint_uuid,
            allocation_id=trial.allocation_id,
            resources={name: len(text) for name, text in names.items()},
            metadata={"steps_completed": 1},
        ),
    )
    return checkpoint_uuid


def _row(master: Master, checkpoint_uuid: str) -> models.Checkpoint | None:
    with master.db.read() as s:
        return s.get(models.Checkpoint, checkpoint_uuid)


def _on_disk(trial: Trial, checkpoint_uuid: str) -> set[str]:
    return set(trial.files.list_files(checkpoint_uuid)) if trial.files.exists(checkpoint_uuid) else set()


def test_globs_remove_matching_files_and_the_rows_follow(master: Master, trial: Trial) -> None:
    ck = _with_files(trial, {"model.pt": "weights", "meta/notes.txt": "n", "optimizer.pt": "o"})
    checkpoints.remove_files(master.ctx, master.checkpoints, master.admin, [ck], ["*.pt"])
    row = _row(master, ck)
    assert row is not None and row.state == "PARTIALLY_DELETED"
    assert row.resources == {"meta/notes.txt": 1} and row.size == 1
    assert _on_disk(trial, ck) == {"meta/notes.txt"}

    # A glob that matches nothing changes nothing (and is no new deletion).
    checkpoints.remove_files(master.ctx, master.checkpoints, master.admin, [ck], ["*.bin"])
    assert _row(master, ck).resources == {"meta/notes.txt": 1}  # type: ignore[union-attr]

    # The last files: the checkpoint is DELETED (its row stays, as on Determined), its files gone.
    checkpoints.remove_files(master.ctx, master.checkpoints, master.admin, [ck], ["**/*"])
    row = _row(master, ck)
    assert row is not None and (row.state, row.resources, row.size) == ("DELETED", {}, 0)
    assert _on_disk(trial, ck) == set()
    # Deleting it again, or reading its files again, changes nothing and is no error.
    checkpoints.delete(master.ctx, master.checkpoints, master.admin, [ck])
    checkpoints.remove_files(master.ctx, master.checkpoints, master.admin, [ck], [])
    assert _row(master, ck).state == "DELETED"  # type: ignore[union-attr]


def test_no_globs_reads_the_files_again(master: Master, trial: Trial) -> None:
    ck = _with_files(trial, {"a": "1", "b": "22"})
    checkpoints.remove_files(master.ctx, master.checkpoints, master.admin, [ck], [])
    row = _row(master, ck)
    assert row is not None and row.state == "COMPLETED" and row.resources == {"a": 1, "b": 2}
    assert master.checkpoints.answered.get("delete", 0) == 0  # nothing deleted to refresh
    with trial.files.store_path(ck) as path:  # a file reached storage outside the master
        (path / "c").write_text("333")
    checkpoints.remove_files(master.ctx, master.checkpoints, master.admin, [ck], [])
    row = _row(master, ck)
    assert row is not None and row.state == "COMPLETED" and row.resources == {"a": 1, "b": 2, "c": 3}
    with trial.files.store_path(ck) as path:  # storage lost files behind the master's back
        (path / "b").unlink()
        (path / "c").unlink()
    checkpoints.remove_files(master.ctx, master.checkpoints, master.admin, [ck], [])
    row = _row(master, ck)
    assert row is not None and row.state == "PARTIALLY_DELETED" and row.resources == {"a": 1}


def test_bad_requests_change_nothing(master: Master, trial: Trial) -> None:
    ck = _with_files(trial, {"model.pt": "w"})
    remove = checkpoints.remove_files
    with pytest.raises(InvalidArgument, match="checkpoint_uuids: required"):
        remove(master.ctx, master.checkpoints, master.admin, [], ["*.pt"])
    with pytest.raises(InvalidArgument, match=r"checkpoint_globs\[1\]"):
        remove(master.ctx, master.checkpoints, master.admin, [ck], ["*.pt", "../outside"])
    with pytest.raises(InvalidArgument, match="checkpoint_globs: more than 100"):
        remove(master.ctx, master.checkpoints, master.admin, [ck], ["*"] * 101)
    with pytest.raises(NotFound, match="checkpoint nope not found"):
        remove(master.ctx, master.checkpoints, master.admin, [ck, "nope"], ["*.pt"])
    with master.db.read() as s:
        found = s.scalar(select(models.User).where(models.User.username == "determined"))
    assert found is not None
    other = Principal(user_id=found.id, username=found.username)
    with pytest.raises(PermissionDenied):
        remove(master.ctx, master.checkpoints, other, [ck], ["*.pt"])
    assert _on_disk(trial, ck) == {"model.pt"} and _row(master, ck).state == "COMPLETED"  # type: ignore[union-attr]


def test_an_experiments_tensorboard_files_go_and_the_experiment_stays(
    master: Master, trial: Trial, tmp_path: Path
) -> None:
    _with_files(trial, {"model.pt": "w"})  # trial code reported: it may have written event files
    tb = tmp_path / "storage" / experiments_dir(master.ctx.cluster_id) / str(trial.experiment_id)
    (tb / "trial" / str(trial.trial_id)).mkdir(parents=True)
    (tb / "trial" / str(trial.trial_id) / "events.out.tfevents.1").write_text("e")
    other = tmp_path / "storage" / experiments_dir(master.ctx.cluster_id) / "999999"
    other.mkdir(parents=True)
    (other / "events.out.tfevents.2").write_text("e")

    files = TensorboardFiles(master.ctx, master.checkpoints)
    with master.db.read() as s:
        found = s.scalar(select(models.User).where(models.User.username == "determined"))
    assert found is not None
    with pytest.raises(PermissionDenied):
        files.delete_for(Principal(user_id=found.id, username=found.username), trial.experiment_id)
    assert tb.exists()
    with pytest.raises(NotFound, match="experiment 424242 not found"):
        files.delete_for(master.admin, 424242)

    files.delete_for(master.admin, trial.experiment_id)
    assert not tb.exists() and (other / "events.out.tfevents.2").exists()
    assert master.experiment(trial.experiment_id) is not None
    files.delete_for(master.admin, trial.experiment_id)  # again: nothing left, not an error

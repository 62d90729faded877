"""TensorBoards are tasks that serve through the master's proxy: a launch names experiments or
trials that exist (bounded, checked before anything is stored), the task is told which trials to
show with each one's checkpoint storage, and an experiment's TensorBoard files (Determined's path
in its checkpoint storage) are deleted with it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from cairn.tensorboard.uploader import TensorboardUploader
from services.master.domain.allocations import task_services
from services.master.domain.experiments import experiments
from services.master.domain.kernel.context import Work
from services.master.domain.kernel.errors import InvalidArgument, NotFound
from services.master.domain.kernel.states import TaskKind
from services.master.domain.task_kinds import tensorboard_sources
from services.master.domain.task_kinds.tensorboard import TENSORBOARD, TENSORBOARD_ENTRYPOINT
from services.master.domain.tasks.tensorboard_files import TensorboardFiles
from services.master.store import models
from tests.unit.master.domain.harness import Master
from tests.unit.master.domain.test_domain_models import Trial


def launch(master: Master, experiment_ids: Sequence[int] = (), trial_ids: Sequence[int] = ()) -> str:
    return master.launch(TaskKind.TENSORBOARD, experiment_ids=list(experiment_ids), trial_ids=list(trial_ids))


@pytest.fixture
def trial(master: Master, tmp_path: Path) -> Trial:
    return Trial(master, tmp_path / "storage")


def test_a_tensorboard_is_told_its_trials_and_their_storage_on_the_port_the_master_gives(
    master: Master, trial: Trial
) -> None:
    task_id = launch(master, experiment_ids=[trial.experiment_id])
    with master.db.read() as s:
        task = s.get_one(models.Task, task_id)
        alloc = s.query(models.Allocation).filter_by(task_id=task_id).one()
        assert task.kind == "TENSORBOARD" and task.slots == 0  # no slot unless asked for
        assert task.config["entrypoint"] == list(TENSORBOARD_ENTRYPOINT)
    (start,) = [c for _, c in master.hub.commands("start") if c.allocation_id == alloc.id]
    env = start.spec.environment
    port = str(task_services.service_port(master.ctx, alloc.port_offset or 0))
    assert (env["CAIRN_SERVICE_PORT"], env["TENSORBOARD_PORT"]) == (port, port)
    (source,) = json.loads(env["CAIRN_TENSORBOARD_SOURCES"])
    assert (source["experiment_id"], source["trial_id"]) == (trial.experiment_id, trial.trial_id)
    assert source["storage"].items() >= trial.storage.items()
    # In a container it reads the shared_fs storage where trials write it, and cannot change it.
    (mount,) = start.spec.mounts
    assert (mount.host_path, mount.container_path, mount.read_only) == (
        trial.storage["host_path"],
        trial.storage["host_path"],
        True,
    )


def test_a_launch_names_something_that_exists(master: Master, trial: Trial) -> None:
    with pytest.raises(InvalidArgument, match=r"^experiment_ids: name experiments"):
        launch(master)
    with pytest.raises(NotFound, match=r"^experiment_ids: experiment 999 not found"):
        launch(master, experiment_ids=[trial.experiment_id, 999])
    with pytest.raises(NotFound, match=r"^trial_ids: trial 777 not found"):
        launch(master, trial_ids=[trial.trial_id, 777])
    with pytest.raises(InvalidArgument, match=r"^trial_ids: 101 ids; at most 100"):
        launch(master, trial_ids=list(range(1, 102)))
    with pytest.raises(InvalidArgument, match=r"^config\.entrypoint"):
        TENSORBOARD.config_for({"entrypoint": "sh"}, {"experiment_ids": [1], "trial_ids": []})
    with master.db.read() as s:
        assert s.query(models.Task).filter_by(kind="TENSORBOARD").count() == 0  # nothing stored


def test_a_tensorboard_of_named_trials_shows_only_those(master: Master, trial: Trial) -> None:
    task_id = launch(master, trial_ids=[trial.trial_id])
    with master.db.read() as s:
        task = s.get_one(models.Task, task_id)
        assert tensorboard_sources.shown_ids(task.config) == ([], [trial.trial_id])
        assert [item["trial_id"] for item in tensorboard_sources.sources(Work(s), task)] == [trial.trial_id]


@pytest.mark.on_each_database  # deletion
def test_an_experiments_tensorboard_files_go_with_it(master: Master, trial: Trial, tmp_path: Path) -> None:
    master.ctx.experiment_delete_hooks.append(
        TensorboardFiles(master.ctx, master.checkpoints).delete_experiment_files
    )
    local = tmp_path / "tb"
    local.mkdir()
    (local / "events.out.tfevents.1.host").write_bytes(b"event")
    uploader = TensorboardUploader.for_trial(
        trial.storage, "test-cluster", trial.experiment_id, trial.trial_id, local
    )
    assert uploader.sync() == 1
    files = Path(trial.storage["host_path"]) / f"test-cluster/tensorboard/experiment/{trial.experiment_id}"
    assert (files / f"trial/{trial.trial_id}/events.out.tfevents.1.host").read_bytes() == b"event"
    trial.complete()
    master.run_deferred()  # its GC
    with master.ctx.unit_of_work() as w:
        experiments.mark_deleting(master.ctx, w, experiments.load(w, trial.experiment_id))
    master.run_deferred()
    assert not files.exists()
    assert (Path(trial.storage["host_path"]) / "test-cluster/tensorboard/experiment").is_dir()
    with master.db.read() as s:
        assert s.get(models.Experiment, trial.experiment_id) is None


@pytest.mark.on_each_database  # deletion
def test_an_experiment_that_never_reported_is_deleted_without_a_storage_root(
    master: Master, tmp_path: Path
) -> None:
    master.ctx.experiment_delete_hooks.append(
        TensorboardFiles(master.ctx, master.checkpoints).delete_experiment_files
    )
    master.add_agent("a1")
    experiment_id = master.create(
        checkpoint_storage={"type": "shared_fs", "host_path": str(tmp_path / "none")}, max_restarts=0
    )
    (trial,) = master.trials(experiment_id)
    (container,) = master.run_containers(master.live(trial.id).id)
    master.exit(container, 3)  # died before it reported anything
    master.run_deferred()
    with master.ctx.unit_of_work() as w:
        experiments.mark_deleting(master.ctx, w, experiments.load(w, experiment_id))
    master.run_deferred()
    with master.db.read() as s:
        assert s.get(models.Experiment, experiment_id) is None  # not DELETE_FAILED

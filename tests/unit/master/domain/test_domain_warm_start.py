"""Warm start (searcher.source_trial_id / source_checkpoint_uuid): every trial of the new experiment
records the checkpoint it starts from and is handed it as its latest checkpoint until it has its
own; a source that does not exist, or a trial without a checkpoint, is refused naming the field and
nothing is created."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select

from services.master.domain.checkpoints import checkpoints
from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.reads.listings import trial_rows
from services.master.servicers.api import convert
from services.master.store import models
from tests.unit.master.domain.harness import Master

GRID = {
    "searcher": {"name": "grid", "metric": "loss", "max_length": {"batches": 10}},
    "hyperparameters": {"x": {"type": "categorical", "vals": [1, 2]}},
}


def _checkpoint(master: Master, trial_id: int, steps: int) -> str:
    checkpoint_uuid = str(uuid.uuid4())
    checkpoints.report(
        master.ctx,
        master.admin,
        checkpoints.ReportedCheckpoint(
            uuid=checkpoint_uuid,
            allocation_id=master.live(trial_id).id,
            resources={"state": 1},
            metadata={"steps_completed": steps},
        ),
    )
    return checkpoint_uuid


def _started_from(master: Master, trial_id: int) -> str | None:
    (start,) = [
        cmd for _agent, cmd in master.hub.commands("start") if cmd.allocation_id == master.live(trial_id).id
    ]
    return start.spec.environment.get("DET_LATEST_CHECKPOINT")


def test_trials_start_from_the_source_trials_latest_checkpoint_or_the_named_one(master: Master) -> None:
    master.add_agent("a1", slots=4)
    source_id = master.create()
    (source,) = master.trials(source_id)
    master.run_containers(master.live(source.id).id)
    first = _checkpoint(master, source.id, 3)
    latest = _checkpoint(master, source.id, 6)

    by_trial = master.create(**{**GRID, "searcher": {**GRID["searcher"], "source_trial_id": source.id}})
    trials = master.trials(by_trial)
    assert len(trials) == 2
    for trial in trials:
        assert trial.warm_start_checkpoint_uuid == latest and trial.latest_checkpoint_uuid is None
        assert _started_from(master, trial.id) == latest
    with master.db.read() as s:
        (row, _other) = trial_rows(s, trials)
    assert convert.trial(row).warm_start_checkpoint_uuid == latest

    by_uuid = master.create(searcher={**GRID["searcher"], "name": "single", "source_checkpoint_uuid": first})
    (trial,) = master.trials(by_uuid)
    assert trial.warm_start_checkpoint_uuid == first and _started_from(master, trial.id) == first

    # Once the trial has a checkpoint of its own, a restart resumes from that one.
    (container,) = master.run_containers(master.live(trial.id).id)
    own = _checkpoint(master, trial.id, 2)
    master.exit(container, 1)
    assert _started_from(master, trial.id) == own
    assert master.trials(by_uuid)[0].warm_start_checkpoint_uuid == first

    # A cold start records none.
    (cold,) = master.trials(source_id)
    assert cold.warm_start_checkpoint_uuid is None


@pytest.mark.parametrize(
    ("searcher", "named"),
    [
        ({"source_trial_id": 999}, "searcher.source_trial_id: no trial 999"),
        ({"source_checkpoint_uuid": "no-such-checkpoint"}, "searcher.source_checkpoint_uuid: no checkpoint"),
    ],
)
def test_a_missing_source_is_refused_and_nothing_is_created(
    master: Master, searcher: dict[str, object], named: str
) -> None:
    master.add_agent("a1")
    with pytest.raises(InvalidArgument, match=named):
        master.create(searcher={"name": "single", "metric": "loss", "max_length": {"batches": 1}, **searcher})
    with master.db.read() as s:
        assert list(s.scalars(select(models.Experiment.id))) == []


def test_a_source_trial_without_a_checkpoint_is_refused(master: Master) -> None:
    master.add_agent("a1")
    source_id = master.create()
    (source,) = master.trials(source_id)
    with pytest.raises(InvalidArgument, match=f"no checkpoint found for source trial {source.id}"):
        master.create(searcher={"name": "single", "metric": "loss", "max_length": {"batches": 1},
                                "source_trial_id": source.id})  # fmt: skip
    with master.db.read() as s:
        assert list(s.scalars(select(models.Experiment.id))) == [source_id]

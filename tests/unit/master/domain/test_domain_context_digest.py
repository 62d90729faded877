"""Every start names its context archive by SHA-256 (TaskSpec.context_digest), so that an agent
keeps one copy per archive: the same for every trial of an experiment, and a task's its own."""

from __future__ import annotations

import hashlib

from sqlalchemy import select

from services.master.domain.reads.tasks import task_context_archive
from services.master.store import models
from tests.unit.master.domain.harness import Master, config_text
from tests.unit.master.domain.test_domain_tasks import launch, started


def test_every_trial_of_an_experiment_names_the_same_archive_by_its_digest(master: Master) -> None:
    master.add_agent("a1", slots=2)
    experiment_id = master.create(
        config_text(
            searcher={"name": "grid", "metric": "loss", "max_length": 1},
            hyperparameters={"x": {"type": "int", "minval": 0, "maxval": 1, "count": 2}},
        )
    )
    starts = [command for _, command in master.hub.commands("start")]
    assert len(starts) == 2
    with master.ctx.db.read() as s:
        archive = task_context_archive(s, starts[0].allocation_id)
        stored = s.scalar(
            select(models.ModelDefinition.digest).where(models.ModelDefinition.experiment_id == experiment_id)
        )
    assert archive is not None
    assert (
        {start.spec.context_digest for start in starts} == {hashlib.sha256(archive).hexdigest()} == {stored}
    )


def test_a_task_names_its_own_archive(master: Master) -> None:
    master.add_agent("a1")
    task_id = launch(master, {"entrypoint": ["true"]})
    with master.ctx.db.read() as s:
        (allocation_id,) = s.scalars(select(models.Allocation.id).where(models.Allocation.task_id == task_id))
        archive = task_context_archive(s, allocation_id)
    assert archive is not None
    assert started(master, allocation_id).spec.context_digest == hashlib.sha256(archive).hexdigest()


def test_an_archive_stored_without_a_digest_is_fetched_as_before(master: Master) -> None:
    master.add_agent("a1", slots=1)
    experiment_id = master.create(config_text(searcher={"name": "single", "metric": "loss", "max_length": 1}))
    # A row from before migration 0014: no digest, so the start names none and the agent fetches.
    with master.ctx.unit_of_work() as w:
        w.session.get_one(models.ModelDefinition, experiment_id).digest = None
    (start,) = [command for _, command in master.hub.commands("start")]
    assert start.spec.context_digest  # placed before the change
    trial = master.trials(experiment_id)[0]
    alloc = master.live(trial.id)
    [container_id] = master.run_containers(alloc.id)
    master.exit(container_id, 1)
    master.settle()
    restarted = [command for _, command in master.hub.commands("start")][-1]
    assert restarted.allocation_id != alloc.id and restarted.spec.context_digest == ""

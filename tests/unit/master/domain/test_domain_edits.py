"""Experiment edits the scheduler acts on (max_slots, priority), and edits that are refused whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.master.configuration.pools import PoolSettings
from services.master.domain.experiments import experiment_edits, experiments
from services.master.domain.kernel.errors import InvalidArgument
from services.master.store import models
from tests.unit.master.domain.harness import Master

GRID = {
    "searcher": {"name": "grid", "metric": "loss", "max_length": {"batches": 10}},
    "hyperparameters": {"x": {"type": "categorical", "vals": [1, 2]}},
}


def _edit(master: Master, experiment_id: int, **fields: object) -> None:
    with master.ctx.unit_of_work() as w:
        exp = experiments.load(w, experiment_id)
        experiment_edits.apply(master.ctx, w, exp, experiment_edits.ExperimentEdit(**fields))  # type: ignore[arg-type]
    master.settle()


def _ack_and_exit(master: Master, alloc: models.Allocation) -> None:
    with master.ctx.unit_of_work() as w:
        w.session.get_one(models.Allocation, alloc.id).preempt_acked = True
    (container,) = master.containers(alloc.id)
    master.exit(container.id, 0)


def test_lowering_max_slots_preempts_the_newest_and_holds_its_trial_back(master: Master) -> None:
    master.add_agent("a1", slots=2)
    experiment_id = master.create(**GRID)
    first, second = master.trials(experiment_id)
    for trial in (first, second):
        master.run_containers(master.live(trial.id).id)

    _edit(master, experiment_id, max_slots=1)
    preempted = [t for t in (first, second) if master.live(t.id).preempt_requested]
    assert len(preempted) == 1  # one allocation goes, gracefully (not a kill)
    (victim,) = preempted
    assert not master.live(victim.id).kill_requested
    _ack_and_exit(master, master.live(victim.id))

    # Its trial queues again but is not offered to the scheduler while the cap is reached.
    waiting = master.live(victim.id)
    assert waiting.state == "PENDING" and waiting.run_id == 2
    reason, _ = master.scheduling.waiting.reasons[waiting.id]
    assert "max_slots 1" in reason
    assert master.trials(experiment_id)[[first, second].index(victim)].state == "ACTIVE"

    _edit(master, experiment_id, max_slots=0)  # 0 lifts the cap
    assert master.live(victim.id).state == "ASSIGNED"


def test_a_raised_priority_preempts_lower_work_where_the_pool_allows(tmp_path: Path) -> None:
    master = Master(tmp_path / "m", pools=[PoolSettings(name="default", preemption_enabled=True)])
    try:
        master.add_agent("a1", slots=1)
        low = master.create()
        (low_trial,) = master.trials(low)
        master.run_containers(master.live(low_trial.id).id)
        high = master.create()
        (high_trial,) = master.trials(high)
        assert master.live(high_trial.id).state == "PENDING"  # equal priority: it waits its turn

        _edit(master, high, priority=10)
        assert master.live(high_trial.id).priority == 10
        assert master.live(low_trial.id).preempt_requested
        _ack_and_exit(master, master.live(low_trial.id))
        assert master.live(high_trial.id).state == "ASSIGNED"
        assert master.live(low_trial.id).state == "PENDING"
    finally:
        master.close()


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"labels": ["ok"], "priority": 0}, "resources.priority"),
        ({"description": "fine", "weight": 0.0}, "resources.weight"),
        ({"name": "  "}, "name"),
        ({"labels": ["a", ""]}, "labels[1]"),
        ({"max_slots": -1}, "resources.max_slots"),
        ({"resource_pool": "nowhere"}, "resource_pool"),
    ],
)
def test_a_refused_edit_names_its_field_and_changes_nothing(
    master: Master, fields: dict[str, object], named: str
) -> None:
    experiment_id = master.create()
    before = master.experiment(experiment_id)
    with pytest.raises(InvalidArgument, match=named.replace("[", r"\[")):
        _edit(master, experiment_id, **fields)
    after = master.experiment(experiment_id)
    assert (after.config, after.labels, after.description, after.name) == (
        before.config,
        before.labels,
        before.description,
        before.name,
    )

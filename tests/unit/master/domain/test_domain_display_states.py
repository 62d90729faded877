"""The state the API answers for an experiment or a trial (reads/display_states.py), on both
databases: an ACTIVE one shows its allocations' progress as Determined's enrichExperimentState and
enrichTrialState do (any RUNNING → RUNNING, else STARTING > PULLING, else QUEUED), every other state
is answered as stored, the stored state stays ACTIVE, filters by state compare the stored one, and a
page is answered by one query however long it is."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event, select
from sqlalchemy.orm import Session

from cairn.agent.v1 import agent_pb2 as apb
from services.master.domain.experiments import experiments, unmanaged
from services.master.domain.kernel.states import RunState
from services.master.domain.reads import experiments as experiment_reads
from services.master.domain.reads import trials as trial_reads
from services.master.domain.reads.display_states import (
    display_state,
    experiment_display_states,
    trial_display_states,
)
from services.master.domain.reads.listings import ExperimentFilter, experiment_rows_by_id, list_experiment_ids
from services.master.store import models
from tests.unit.master.domain.harness import Master, config_text
from tests.unit.master.domain.test_domain_unmanaged import core_v2_config

pytestmark = pytest.mark.on_each_database

# What an agent reports to move a placed allocation to each state.
CONTAINER = {
    "PULLING": [apb.CONTAINER_STATE_PULLING],
    "STARTING": [apb.CONTAINER_STATE_PULLING, apb.CONTAINER_STATE_STARTING],
    "RUNNING": [apb.CONTAINER_STATE_PULLING, apb.CONTAINER_STATE_STARTING, apb.CONTAINER_STATE_RUNNING],
}
# A trial's answered state for its one allocation's state.
TRIAL_SHOWS = {
    "PENDING": "QUEUED",
    "ASSIGNED": "QUEUED",
    "PULLING": "PULLING",
    "STARTING": "STARTING",
    "RUNNING": "RUNNING",
}


def grid(trials: int) -> str:
    return config_text(
        searcher={"name": "grid", "metric": "loss", "max_length": 1, "max_concurrent_trials": 0},
        hyperparameters={"x": {"type": "int", "minval": 0, "maxval": max(trials - 1, 1), "count": trials}},
    )


def shown_experiment(m: Master, experiment_id: int) -> str:
    with m.db.read() as s:
        return experiment_reads.experiment_row(s, experiment_id).state


def shown_trials(m: Master, experiment_id: int) -> dict[int, str]:
    with m.db.read() as s:
        rows, _page = experiment_reads.experiment_trials(s, experiment_id)
        return {r.trial.id: r.state for r in rows}


def move_to(m: Master, allocation_id: str, state: str) -> None:
    (container,) = m.containers(allocation_id)
    for step in CONTAINER[state]:
        m.container_state(container.id, step)


@contextmanager
def statements(s: Session) -> Iterator[list[str]]:
    """The SQL statements the session's engine runs inside the block."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        seen.append(statement)

    engine = s.get_bind()
    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


@pytest.mark.parametrize(
    ("mix", "expected"),
    [
        (("PENDING",), "QUEUED"),
        (("ASSIGNED",), "QUEUED"),
        (("PULLING",), "PULLING"),
        (("STARTING",), "STARTING"),
        (("RUNNING",), "RUNNING"),
        (("PENDING", "PULLING"), "PULLING"),
        (("ASSIGNED", "PENDING"), "QUEUED"),
        (("PULLING", "STARTING"), "STARTING"),
        (("ASSIGNED", "PULLING", "STARTING"), "STARTING"),
        (("PENDING", "STARTING", "RUNNING"), "RUNNING"),
        (("RUNNING", "RUNNING", "PULLING"), "RUNNING"),
    ],
)
def test_an_active_experiment_shows_its_most_progressed_allocation(
    master: Master, mix: tuple[str, ...], expected: str
) -> None:
    m = master
    placed = [state for state in mix if state != "PENDING"]
    for i in range(len(placed)):
        m.add_agent(f"agent-{i}")
    experiment_id = m.create(grid(len(mix)))
    trials = m.trials(experiment_id)
    assert len(trials) == len(mix)
    # The placed allocations, moved to the mix's states (which trial gets which does not matter).
    live = [m.live(t.id) for t in trials]
    assigned = [a for a in live if a.state == "ASSIGNED"]
    assert len(assigned) == len(placed)
    for alloc, state in zip(assigned, placed, strict=True):
        if state != "ASSIGNED":
            move_to(m, alloc.id, state)

    assert shown_experiment(m, experiment_id) == expected
    assert m.experiment(experiment_id).state == RunState.ACTIVE  # stored as it was
    expected_trials = {t.id: TRIAL_SHOWS[m.live(t.id).state] for t in trials}
    assert sorted(expected_trials.values()) == sorted(TRIAL_SHOWS[state] for state in mix)
    assert shown_trials(m, experiment_id) == expected_trials
    with m.db.read() as s:
        for t in trials:
            assert trial_reads.trial_row(s, t.id).state == expected_trials[t.id]
            assert s.get_one(models.Trial, t.id).state == RunState.ACTIVE


def test_an_ended_run_counts_for_nothing_and_a_restart_waits_queued(master: Master) -> None:
    m = master
    m.add_agent("agent-0")
    experiment_id = m.create()
    (trial,) = m.trials(experiment_id)
    first = m.live(trial.id)
    move_to(m, first.id, "RUNNING")
    assert shown_experiment(m, experiment_id) == "RUNNING"

    (container,) = m.containers(first.id)
    m.exit(container.id, 1)  # fails once; max_restarts 1: a new allocation
    second = m.live(trial.id)
    assert second.id != first.id and second.state in ("PENDING", "ASSIGNED")
    assert [a.state for a in m.allocations(trial.id)] == ["TERMINATED", second.state]
    assert shown_experiment(m, experiment_id) == "QUEUED"
    assert shown_trials(m, experiment_id) == {trial.id: "QUEUED"}
    move_to(m, second.id, "PULLING")
    assert shown_experiment(m, experiment_id) == "PULLING"


def test_paused_stopping_and_ended_experiments_are_answered_as_stored(master: Master) -> None:
    m = master
    m.add_agent("agent-0")
    experiment_id = m.create()
    (trial,) = m.trials(experiment_id)
    alloc = m.live(trial.id)
    move_to(m, alloc.id, "RUNNING")
    assert (shown_experiment(m, experiment_id), shown_trials(m, experiment_id)) == (
        "RUNNING",
        {trial.id: "RUNNING"},
    )

    # Pausing a RUNNING experiment is ACTIVE → PAUSED; its allocation still runs while it stops.
    with m.ctx.unit_of_work() as w:
        experiments.pause(m.ctx, w, experiments.load(w, experiment_id))
    assert m.live(trial.id).state == "RUNNING"
    assert (shown_experiment(m, experiment_id), shown_trials(m, experiment_id)) == (
        "PAUSED",
        {trial.id: "PAUSED"},
    )
    with m.ctx.unit_of_work() as w:
        w.session.get_one(models.Allocation, alloc.id).preempt_acked = True
    (container,) = m.containers(alloc.id)
    m.exit(container.id, 0)
    assert shown_experiment(m, experiment_id) == "PAUSED"

    # Activate: ACTIVE again, answered by its new allocation's progress.
    with m.ctx.unit_of_work() as w:
        experiments.activate(m.ctx, w, experiments.load(w, experiment_id))
    m.settle()
    assert m.experiment(experiment_id).state == RunState.ACTIVE
    assert shown_experiment(m, experiment_id) == "QUEUED"
    resumed = m.live(trial.id)
    move_to(m, resumed.id, "RUNNING")
    assert shown_experiment(m, experiment_id) == "RUNNING"

    # Kill: STOPPING_KILLED while the allocation terminates, then CANCELED.
    with m.ctx.unit_of_work() as w:
        experiments.kill(m.ctx, w, experiments.load(w, experiment_id))
    assert m.live(trial.id).state == "TERMINATING"
    assert shown_experiment(m, experiment_id) == "STOPPING_KILLED"
    assert shown_trials(m, experiment_id) == {trial.id: "STOPPING_KILLED"}
    (container,) = m.containers(resumed.id)
    m.exit(container.id, 137, apb.FAILURE_TYPE_KILLED)
    assert (shown_experiment(m, experiment_id), shown_trials(m, experiment_id)) == (
        "CANCELED",
        {trial.id: "CANCELED"},
    )


def test_the_rule_leaves_every_state_but_active_as_stored() -> None:
    for state in RunState:
        for progress in (None, 0, 1, 2, 3):
            for unmanaged_run in (False, True):
                shown = display_state(state, progress, unmanaged=unmanaged_run)
                if state != RunState.ACTIVE:
                    assert shown == state
    assert [display_state(RunState.ACTIVE, p) for p in (None, 0, 1, 2, 3)] == [
        "QUEUED",
        "QUEUED",
        "PULLING",
        "STARTING",
        "RUNNING",
    ]
    assert display_state(RunState.ACTIVE, None, unmanaged=True) == "RUNNING"


def test_an_unmanaged_run_its_code_reports_running_answers_running(master: Master) -> None:
    m = master
    exp_id = unmanaged.create_experiment(m.ctx, m.admin, core_v2_config()).experiment_id
    trial_id = unmanaged.create_trial(m.ctx, m.admin, exp_id, {})
    assert (shown_experiment(m, exp_id), shown_trials(m, exp_id)) == ("PAUSED", {trial_id: "PAUSED"})
    unmanaged.start_trial(m.ctx, m.admin, trial_id, resume=True)
    unmanaged.patch_trial(m.ctx, m.admin, trial_id, RunState.ACTIVE)  # its code: RUNNING
    assert m.experiment(exp_id).state == RunState.ACTIVE
    assert (shown_experiment(m, exp_id), shown_trials(m, exp_id)) == ("RUNNING", {trial_id: "RUNNING"})
    unmanaged.patch_trial(m.ctx, m.admin, trial_id, RunState.COMPLETED)
    assert (shown_experiment(m, exp_id), shown_trials(m, exp_id)) == ("COMPLETED", {trial_id: "COMPLETED"})


def test_filters_by_state_compare_the_stored_state_as_determined_does(master: Master) -> None:
    m = master
    m.add_agent("agent-0")
    running = m.create()
    move_to(m, m.live(m.trials(running)[0].id).id, "RUNNING")
    queued = m.create()
    paused = m.create()
    with m.ctx.unit_of_work() as w:
        experiments.pause(m.ctx, w, experiments.load(w, paused))

    def ids(*states: str) -> list[int]:
        with m.db.read() as s:
            found, _page = list_experiment_ids(
                s, ExperimentFilter(states=states), sort="id", descending=False, offset=0, limit=0
            )
            return found

    # STATE_ACTIVE finds the running and the queued one; RUNNING and QUEUED are never stored.
    assert ids("ACTIVE") == [running, queued]
    assert ids("RUNNING") == [] and ids("QUEUED") == []
    assert ids("PAUSED") == [paused]
    with m.db.read() as s:
        rows = experiment_rows_by_id(s, ids("ACTIVE"))
    assert [r.state for r in rows] == ["RUNNING", "QUEUED"]
    with m.db.read() as s:
        (trial,) = m.trials(running)
        found, _page = experiment_reads.experiment_trials(s, running, states=["RUNNING"])
        assert found == []
        found, _page = experiment_reads.experiment_trials(s, running, states=["ACTIVE"])
        assert [(r.trial.id, r.state) for r in found] == [(trial.id, "RUNNING")]


def test_a_page_is_answered_by_one_query_whatever_its_length(master: Master) -> None:
    m = master
    m.add_agent("agent-0", slots=16)
    ids = [m.create(grid(2)) for _ in range(8)]
    for experiment_id in ids[:2]:
        move_to(m, m.live(m.trials(experiment_id)[0].id).id, "RUNNING")
    with m.ctx.unit_of_work() as w:
        experiments.pause(m.ctx, w, experiments.load(w, ids[-1]))

    with m.db.read() as s:
        page = list(s.scalars(select(models.Experiment).where(models.Experiment.id.in_(ids))))
        trials = list(s.scalars(select(models.Trial).where(models.Trial.experiment_id.in_(ids))))
        with statements(s) as seen:
            shown = experiment_display_states(s, page)
        assert len(seen) == 1
        with statements(s) as seen:
            shown_trials_page = trial_display_states(s, trials)
        assert len(seen) == 1
        with statements(s) as seen:
            assert experiment_display_states(s, page[-1:]) == {ids[-1]: "PAUSED"}
            assert trial_display_states(s, []) == {}
        assert seen == []  # nothing ACTIVE on the page: nothing asked
    assert [shown[i] for i in ids] == ["RUNNING", "RUNNING"] + ["QUEUED"] * 5 + ["PAUSED"]
    assert sorted(shown_trials_page.values()) == ["PAUSED"] * 2 + ["QUEUED"] * 12 + ["RUNNING"] * 2

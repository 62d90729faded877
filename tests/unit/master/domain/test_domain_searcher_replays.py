"""The built-in searcher's state stored every STATE_EVERY_EVENTS events (experiments/searcher_pump.py):
between two stored states the events applied since the last are kept, a session the searcher lost
is restored from the state and those events and goes on exactly as one never lost, storing a state
drops the events it covers, and a custom searcher's state is stored with every answer."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select

from services.master.domain.experiments import searcher_pump
from services.master.store import models
from tests.unit.master.domain.harness import Master

pytestmark = pytest.mark.on_each_database  # the compare-and-set UPDATEs and INSERTs on each database


def _random_search(master: Master, seed: int = 11) -> int:
    return master.create(
        searcher={
            "name": "random",
            "metric": "loss",
            "max_trials": 6,
            "max_concurrent_trials": 1,
            "max_length": {"batches": 10},
        },
        hyperparameters={"x": {"type": "double", "minval": 0, "maxval": 1}},
        reproducibility={"experiment_seed": seed},
    )


def _finish_next(master: Master, experiment_id: int) -> None:
    """The experiment's one running trial reports a validation and exits 0."""
    (trial,) = [t for t in master.trials(experiment_id) if t.state == "ACTIVE"]
    (container,) = master.run_containers(master.live(trial.id).id)
    master.report(trial.id, 1, "validation", 10, 1, loss=float(trial.hparams["x"]))
    master.exit(container, 0)


def _stored(master: Master, experiment_id: int) -> tuple[int, int, int]:
    """(seq, state_seq, replays) of the experiment's stored search."""
    with master.db.read() as s:
        snapshot = s.get_one(models.SearcherSnapshot, experiment_id)
        replays = s.scalar(
            select(func.count())
            .select_from(models.SearcherReplay)
            .where(models.SearcherReplay.experiment_id == experiment_id)
        )
        return snapshot.seq, snapshot.state_seq, int(replays or 0)


def _drawn(master: Master, experiment_id: int) -> list[tuple[str, Any]]:
    return [(t.request_id, t.hparams["x"]) for t in master.trials(experiment_id)]


def test_a_lost_session_comes_back_from_the_state_and_its_replays_as_if_never_lost(master: Master) -> None:
    master.add_agent("a1")
    reference = _random_search(master)
    for _ in range(6):
        _finish_next(master, reference)
    assert master.experiment(reference).state == "COMPLETED"

    experiment_id = _random_search(master)
    created_at = _stored(master, experiment_id)
    for _ in range(2):
        _finish_next(master, experiment_id)
    seq, state_seq, replays = _stored(master, experiment_id)
    # Only the creation's answer stored a state; every event since is kept to replay.
    assert state_seq == created_at[1] and seq > state_seq and replays == seq - state_seq

    master.searchers.searcher.restart()  # the searcher process restarted and lost the session
    for _ in range(4):
        _finish_next(master, experiment_id)
    assert master.experiment(experiment_id).state == "COMPLETED"
    # The same trials, drawn in the same order, as the search that was never interrupted.
    assert [x for _, x in _drawn(master, experiment_id)] == [x for _, x in _drawn(master, reference)]
    assert len({rid for rid, _ in _drawn(master, experiment_id)}) == 6


def test_a_stored_state_drops_the_replays_it_covers(master: Master, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(searcher_pump, "STATE_EVERY_EVENTS", 3)
    master.add_agent("a1")
    experiment_id = _random_search(master)
    seen = []
    for _ in range(4):
        _finish_next(master, experiment_id)
        seq, state_seq, replays = _stored(master, experiment_id)
        assert replays == seq - state_seq < 3
        seen.append(state_seq)
    assert seen[-1] > seen[0]  # states were stored along the way
    master.searchers.searcher.restart()
    for _ in range(2):
        _finish_next(master, experiment_id)
    assert master.experiment(experiment_id).state == "COMPLETED"
    assert len(master.trials(experiment_id)) == 6


def test_a_searcher_that_may_not_replay_exactly_stores_its_state_with_every_answer(master: Master) -> None:
    master.searchers.searcher.replays_exactly = False
    master.add_agent("a1")
    experiment_id = _random_search(master)
    for _ in range(3):
        _finish_next(master, experiment_id)
        seq, state_seq, replays = _stored(master, experiment_id)
        assert (state_seq, replays) == (seq, 0)

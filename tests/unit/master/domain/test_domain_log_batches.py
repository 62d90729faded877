"""Agents' log batches shipped at the same moment are stored in one transaction (a group commit):
every line is stored once, each agent hears its own highest seq per container, and the containers'
acknowledged seqs move with them. An agent speaks only for its own containers: lines it sends for
another agent's, or for no container, are dropped unacknowledged, and its own lines beside them are
stored."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from sqlalchemy import func, select

from cairn.agent.v1 import agent_pb2 as apb
from services.master.domain.metrics.logs import LogStore
from services.master.store import models
from tests.unit.master.domain.harness import Master
from tests.unit.master.domain.held_insert import held_insert


def _batch(container: str, seqs: range) -> apb.LogBatch:
    return apb.LogBatch(
        entries=[apb.LogEntry(container_id=container, seq=seq, message=f"line {seq}") for seq in seqs]
    )


def test_batches_shipped_at_once_share_a_transaction_and_are_each_acknowledged(
    master_on_each_database: Master,
) -> None:
    master = master_on_each_database
    for n in range(6):
        master.add_agent(f"a{n}", slots=1)
    experiment_id = master.create(
        searcher={"name": "grid", "metric": "loss", "max_length": {"batches": 1}, "max_concurrent_trials": 0},
        hyperparameters={"x": {"type": "categorical", "vals": list(range(6))}},
    )
    containers = [
        c for t in master.trials(experiment_id) for c in master.run_containers(master.live(t.id).id)
    ]
    # Each container's lines come from its own agent (the one it runs on).
    agent_of = {
        c.id: c.agent_id
        for t in master.trials(experiment_id)
        for c in master.containers(master.live(t.id).id)
    }
    store = LogStore(master.ctx)

    with held_insert(master.ctx.db.engine) as hold:
        first = hold.start(lambda: store.store(agent_of[containers[0]], _batch(containers[0], range(1, 4))))
        with ThreadPoolExecutor(5) as pool:
            # Five more agents ship while the first batch is being stored; one resends line 1.
            futures = [
                pool.submit(store.store, agent_of[containers[n]], _batch(containers[n], range(1, 2 + n)))
                for n in range(1, 6)
            ]
            for _ in range(500):
                if store._commits.queued == 5:
                    break
                threading.Event().wait(0.01)
            hold.release()
            first.join(10)
            acked = [f.result(timeout=10) for f in futures]
        resent = store.store(agent_of[containers[1]], _batch(containers[1], range(1, 2)))
    assert acked == [{containers[n]: 1 + n} for n in range(1, 6)]
    assert resent == {containers[1]: 1}
    # The first batch alone, the five queued behind it together, then the resend.
    assert (store._commits.stats.items, store._commits.stats.batches) == (7, 3)
    with master.db.read() as s:
        stored = dict(
            s.execute(
                select(models.TaskLog.container_id, func.count()).group_by(models.TaskLog.container_id)
            ).all()
        )
        acked_seqs = dict(s.execute(select(models.Container.id, models.Container.acked_seq)).all())
    assert stored == {containers[0]: 3, **{containers[n]: 1 + n for n in range(1, 6)}}
    assert {c: acked_seqs[c] for c in containers} == {
        containers[0]: 3,
        **{containers[n]: 1 + n for n in range(1, 6)},
    }


def test_lines_for_another_agents_container_are_dropped_and_its_own_are_stored(master: Master) -> None:
    master.add_agent("a1", slots=1)
    master.add_agent("a2", slots=1)
    experiment_id = master.create(
        searcher={"name": "grid", "metric": "loss", "max_length": {"batches": 1}, "max_concurrent_trials": 0},
        hyperparameters={"x": {"type": "categorical", "vals": [1, 2]}},
    )
    on: dict[str, str] = {}
    for trial in master.trials(experiment_id):
        master.run_containers(master.live(trial.id).id)
        on.update({c.agent_id: c.id for c in master.containers(master.live(trial.id).id)})
    store = LogStore(master.ctx)

    # a2 ships a line of its own, one for a1's container (a trial it does not run) and one for a
    # container that does not exist.
    batch = apb.LogBatch(
        entries=[
            apb.LogEntry(container_id=on["a2"], seq=1, message="mine"),
            apb.LogEntry(container_id=on["a1"], seq=1, message="ERROR: injected into a1's trial"),
            apb.LogEntry(container_id="no-such-container", seq=1, message="nobody's"),
        ]
    )
    assert store.store("a2", batch) == {on["a2"]: 1}
    with master.db.read() as s:
        lines = s.execute(
            select(models.TaskLog.container_id, models.TaskLog.agent_id, models.TaskLog.message)
        ).all()
        acked = dict(s.execute(select(models.Container.id, models.Container.acked_seq)).all())
    assert [tuple(line) for line in lines] == [(on["a2"], "a2", "mine")]
    assert (acked[on["a1"]], acked[on["a2"]]) == (0, 1)

    # a1's own line for its container is stored as ever.
    assert store.store("a1", _batch(on["a1"], range(1, 2))) == {on["a1"]: 1}


def test_a_late_resend_never_lowers_the_acknowledged_seq_and_a_bad_timestamp_fails_no_batch(
    master: Master,
) -> None:
    master.add_agent("a1", slots=1)
    experiment_id = master.create(
        searcher={"name": "grid", "metric": "loss", "max_length": {"batches": 1}, "max_concurrent_trials": 0},
        hyperparameters={"x": {"type": "categorical", "vals": [1]}},
    )
    (trial,) = master.trials(experiment_id)
    (container,) = master.run_containers(master.live(trial.id).id)
    store = LogStore(master.ctx)
    assert store.store("a1", _batch(container, range(1, 6))) == {container: 5}
    assert store.store("a1", _batch(container, range(2, 4))) == {container: 3}  # a late resend
    # A timestamp no datetime holds (a clock gone wrong, or a hostile agent): the line is stored
    # at the time it came, the batch with it.
    wild = apb.LogEntry(container_id=container, seq=6, message="from the far future")
    wild.timestamp.seconds = 10**12
    assert store.store("a1", apb.LogBatch(entries=[wild])) == {container: 6}
    with master.db.read() as s:
        assert s.get_one(models.Container, container).acked_seq == 6
        assert s.scalar(select(func.count()).select_from(models.TaskLog)) == 6
        stored = s.scalar(select(models.TaskLog.timestamp).where(models.TaskLog.seq == 6))
    assert stored is not None and stored.year == datetime.now(UTC).year

"""Agents' log batches shipped at the same moment are stored in one transaction (a group commit):
every line is stored once, each agent hears its own highest seq per container, and the containers'
acknowledged seqs move with them."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

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
    master.add_agent("a1", slots=6)
    experiment_id = master.create(
        searcher={"name": "grid", "metric": "loss", "max_length": {"batches": 1}, "max_concurrent_trials": 0},
        hyperparameters={"x": {"type": "categorical", "vals": list(range(6))}},
    )
    containers = [
        c for t in master.trials(experiment_id) for c in master.run_containers(master.live(t.id).id)
    ]
    store = LogStore(master.ctx)

    with held_insert(master.ctx.db.engine) as hold:
        first = hold.start(lambda: store.store("a1", _batch(containers[0], range(1, 4))))
        with ThreadPoolExecutor(5) as pool:
            # Five more agents ship while the first batch is being stored; one resends line 1.
            futures = [
                pool.submit(store.store, f"a{n}", _batch(containers[n], range(1, 2 + n))) for n in range(1, 6)
            ]
            for _ in range(500):
                if store._commits.queued == 5:
                    break
                threading.Event().wait(0.01)
            hold.release()
            first.join(10)
            acked = [f.result(timeout=10) for f in futures]
        resent = store.store("a1", _batch(containers[1], range(1, 2)))
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

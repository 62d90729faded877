"""A followed log reads a trial's lines by id, so they must become visible in id order. Two stores of
one trial's lines at once (its containers on two agents, each agent's lines on its own stream
thread) commit one after the other, in the order they took their ids: PostgreSQL takes a line's id
at its INSERT, and a later batch committing first once made the follower read past the earlier one
for good."""

from __future__ import annotations

import threading
import time

from cairn.agent.v1 import agent_pb2 as apb
from services.master.domain.kernel.topics import trial_logs_topic
from services.master.domain.metrics.logs import LogFilter, LogStore, read_logs
from tests.unit.master.domain.harness import Master
from tests.unit.master.domain.held_insert import held_insert


def _batch(container: str, seqs: range) -> apb.LogBatch:
    return apb.LogBatch(
        entries=[apb.LogEntry(container_id=container, seq=seq, message=f"line {seq}") for seq in seqs]
    )


def test_lines_stored_at_once_are_all_followed_whichever_commits_first(
    master_on_each_database: Master,
) -> None:
    master = master_on_each_database
    master.add_agent("a1", slots=1)
    master.add_agent("a2", slots=1)
    (trial,) = master.trials(master.create(resources={"slots_per_trial": 2}))
    master.run_containers(master.live(trial.id).id)
    # The trial's two containers, one on each agent: each agent ships its own container's lines.
    on = {c.agent_id: c.id for c in master.containers(master.live(trial.id).id)}
    store = LogStore(master.ctx)
    ended = threading.Event()
    followed: list[str] = []
    follower = read_logs(
        master.ctx, LogFilter(trial_id=trial.id), limit=0, descending=False, follow=True, is_done=ended.is_set
    )
    following = threading.Thread(target=lambda: followed.extend(r.message for r in follower), daemon=True)
    following.start()

    with held_insert(master.ctx.db.engine) as hold:
        first = hold.start(lambda: store.store("a1", _batch(on["a1"], range(1, 6))))
        second = threading.Thread(target=lambda: store.store("a2", _batch(on["a2"], range(6, 11))))
        second.start()
        second.join(0.5)  # it waits for the first (it would have committed by now)
        time.sleep(0.3)  # the follower reads whatever is committed
        hold.release()
        first.join(10)
        second.join(10)
    # Until the follower has read all ten (bounded); then its log is over.
    deadline = time.monotonic() + 10
    while len(followed) < 10 and time.monotonic() < deadline:
        time.sleep(0.01)
    ended.set()
    master.ctx.topics.publish(trial_logs_topic(trial.id))
    following.join(10)
    assert sorted(followed, key=lambda m: int(m.split()[1])) == [f"line {n}" for n in range(1, 11)], followed

"""Agents' state changes applied in shared units of work (kernel/batched_units.py): what a batch
applies is what each unit would have applied alone, a unit that raises fails alone, an outage
reaches every caller of its batch, and one thread's units keep its order."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from cairn.agent.v1 import agent_pb2 as apb
from services.master.domain import wiring
from services.master.domain.allocations import containers
from services.master.domain.kernel.batched_units import BatchedUnits
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.errors import DatabaseUnavailable, NotFound
from services.master.store import models
from tests.unit.master.domain.harness import Master

pytestmark = pytest.mark.on_each_database  # locks and transactions as each database has them


def _grid(master: Master, trials: int) -> tuple[int, list[str]]:
    """`trials` one-slot trials placed on one agent: the experiment, its containers' ids."""
    master.add_agent("a1", slots=trials)
    experiment_id = master.create(
        searcher={"name": "grid", "metric": "loss", "max_length": {"batches": 1}, "max_concurrent_trials": 0},
        hyperparameters={"x": {"type": "categorical", "vals": list(range(trials))}},
    )
    found = [c.id for t in master.trials(experiment_id) for c in master.containers(master.live(t.id).id)]
    assert len(found) == trials
    return experiment_id, found


Call = Callable[[Work], object]


def _all_at_once(master: Master, units: BatchedUnits, calls: Sequence[Call | _Change]) -> list[object]:
    """Each call run through `units` from a thread of its own, all queued while the master's lock
    is held so that they share batches; each call's outcome (its result, or what it raised)."""

    def run(call: Call | _Change) -> object:
        try:
            if isinstance(call, _Change):
                return units.run(call, key=call.key)
            return units.run(call)
        except Exception as exc:
            return exc

    batches_before = units.stats.batches
    with ThreadPoolExecutor(len(calls)) as pool:
        with master.ctx.lock:
            futures = [pool.submit(run, call) for call in calls]
            # The leader took its batch (and stopped at the lock); every other thread is queued.
            for _ in range(500):
                if units.stats.batches > batches_before and units.queued >= len(calls) - 1:
                    break
                threading.Event().wait(0.01)
        return [f.result(timeout=60) for f in futures]


def _container(master: Master, container_id: str) -> models.Container:
    with master.db.read() as s:
        return s.get_one(models.Container, container_id)


class _Change:
    """A container's state change as the agent stream applies it: a unit with its ReportKey."""

    def __init__(
        self, ctx: MasterContext, container_id: str, state: int, seq: int, exit_code: int | None = None
    ) -> None:
        self.ctx = ctx
        self.message = apb.ContainerStateChanged(container_id=container_id, state=state, seq=seq)  # type: ignore[arg-type]
        if exit_code is not None:
            self.message.exit_code = exit_code
        self.key = containers.ReportKey(container_id, ends=state == apb.CONTAINER_STATE_TERMINATED)

    def __call__(self, w: Work) -> None:
        containers.on_container_state(self.ctx, w, self.message)


def _units(master: Master, **options: int) -> BatchedUnits:
    return BatchedUnits(master.ctx, prepare=wiring.preload_agent_reports, **options)


def test_a_burst_of_state_changes_shares_transactions_and_ends_as_each_alone_would(master: Master) -> None:
    experiment_id, ids = _grid(master, 8)
    units = _units(master)
    assert (
        _all_at_once(master, units, [_Change(master.ctx, c, apb.CONTAINER_STATE_RUNNING, 1) for c in ids])
        == [None] * 8
    )
    # The leader's own unit, then the seven queued behind it in one transaction.
    assert (units.stats.items, units.stats.batches, units.stats.split) == (8, 2, 0)
    assert {_container(master, c).state for c in ids} == {"RUNNING"}
    # Resent after a reconnect (the same seq) and ended, in one burst: each applied once.
    resent = [_Change(master.ctx, c, apb.CONTAINER_STATE_RUNNING, 1) for c in ids]
    ended = [_Change(master.ctx, c, apb.CONTAINER_STATE_TERMINATED, 2, exit_code=0) for c in ids]
    assert _all_at_once(master, units, resent + ended) == [None] * 16
    master.settle()
    for container_id in ids:
        container = _container(master, container_id)
        assert (container.state, container.exit_code, container.acked_seq) == ("TERMINATED", 0, 2)
    assert {t.state for t in master.trials(experiment_id)} == {"COMPLETED"}


def test_a_unit_that_raises_fails_alone_and_the_rest_of_its_batch_commits(master: Master) -> None:
    _, ids = _grid(master, 4)
    units = _units(master)

    def refuses(w: Work) -> None:
        w.session.get_one(models.Container, ids[0]).acked_seq = 99  # rolled back with its batch
        raise NotFound("no such thing")

    calls: list[Callable[[Work], object]] = [
        _Change(master.ctx, c, apb.CONTAINER_STATE_RUNNING, 1) for c in ids[1:]
    ]
    outcomes = _all_at_once(master, units, [*calls[:2], refuses, calls[2]])
    assert outcomes[:2] == [None, None] and outcomes[3] is None
    assert isinstance(outcomes[2], NotFound)
    assert units.stats.split == 1
    assert [_container(master, c).state for c in ids] == ["ASSIGNED", "RUNNING", "RUNNING", "RUNNING"]
    assert _container(master, ids[0]).acked_seq == 0


def test_an_outage_reaches_every_caller_of_its_batch_and_stores_nothing(master: Master) -> None:
    _, ids = _grid(master, 3)
    units = _units(master)

    def connection_lost(w: Work) -> None:
        raise DatabaseUnavailable("the connection was lost", commit_unknown=True)

    calls = [
        _Change(master.ctx, ids[0], apb.CONTAINER_STATE_RUNNING, 1),
        _Change(master.ctx, ids[1], apb.CONTAINER_STATE_RUNNING, 1),
    ]
    # The first call leads alone; the other two share the next batch, which the outage fails.
    first, second, lost = _all_at_once(master, units, [calls[0], calls[1], connection_lost])
    assert first is None
    assert isinstance(second, DatabaseUnavailable) and second.commit_unknown
    assert isinstance(lost, DatabaseUnavailable) and lost is not second
    assert [_container(master, c).state for c in ids] == ["RUNNING", "ASSIGNED", "ASSIGNED"]


def test_each_thread_keeps_its_order_and_the_lead_passes_on_when_a_batch_is_full(master: Master) -> None:
    units = _units(master, max_batch=3)
    seen: dict[int, list[int]] = {}

    def sender(thread: int) -> None:
        def take(step: int) -> Callable[[Work], None]:
            return lambda _w: seen.setdefault(thread, []).append(step)

        for step in range(20):
            units.run(take(step))

    workers = [threading.Thread(target=sender, args=(t,)) for t in range(6)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert not any(worker.is_alive() for worker in workers)
    assert seen == {t: list(range(20)) for t in range(6)}
    assert units.stats.items == 120
    assert units.idle

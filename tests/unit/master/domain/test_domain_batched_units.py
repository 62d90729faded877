"""Agents' state changes applied in shared units of work (kernel/batched_units.py): what a batch
applies is what each unit would have applied alone, a unit that raises fails alone, an outage
reaches every caller of its batch, and one thread's units keep its order."""

from __future__ import annotations

import asyncio
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


# --- readers on an event loop (run_async, as the agent stream's readers apply their messages) ---


def _all_at_once_async(master: Master, units: BatchedUnits, calls: Sequence[Call | _Change]) -> list[object]:
    """Each call awaited by a reader of its own on one event loop, all queued while the master's
    lock holds the first batch, so that the rest share the next; each call's outcome."""

    async def run(call: Call | _Change, executor: ThreadPoolExecutor) -> object:
        try:
            return await units.run_async(call, executor, key=call.key if isinstance(call, _Change) else None)
        except Exception as exc:
            return exc

    async def main(executor: ThreadPoolExecutor) -> list[object]:
        return list(await asyncio.gather(*(run(call, executor) for call in calls)))

    with ThreadPoolExecutor(2) as executor, ThreadPoolExecutor(1) as loop_thread:
        # The first batch's lead (in `executor`) stops at the master's lock until the loop has
        # queued every other call behind it.
        master.ctx.lock.acquire()
        try:
            outcome = loop_thread.submit(asyncio.run, main(executor))
            for _ in range(500):
                if units.queued >= len(calls) - 1:
                    break
                threading.Event().wait(0.01)
        finally:
            master.ctx.lock.release()
        return outcome.result(timeout=60)


def test_readers_on_a_loop_share_transactions_and_end_as_each_alone_would(master: Master) -> None:
    experiment_id, ids = _grid(master, 8)
    units = _units(master)
    running = [_Change(master.ctx, c, apb.CONTAINER_STATE_RUNNING, 1) for c in ids]
    assert _all_at_once_async(master, units, running) == [None] * 8
    assert (units.stats.items, units.stats.batches, units.stats.split) == (8, 2, 0)
    resent = [_Change(master.ctx, c, apb.CONTAINER_STATE_RUNNING, 1) for c in ids]
    ended = [_Change(master.ctx, c, apb.CONTAINER_STATE_TERMINATED, 2, exit_code=0) for c in ids]
    assert _all_at_once_async(master, units, resent + ended) == [None] * 16
    master.settle()
    for container_id in ids:
        container = _container(master, container_id)
        assert (container.state, container.exit_code, container.acked_seq) == ("TERMINATED", 0, 2)
    assert {t.state for t in master.trials(experiment_id)} == {"COMPLETED"}
    assert units.idle


def test_a_reader_hears_its_own_error_and_an_outage_reaches_each_reader_of_its_batch(master: Master) -> None:
    _, ids = _grid(master, 4)
    units = _units(master)

    def refuses(w: Work) -> None:
        raise NotFound("no such thing")

    outcomes = _all_at_once_async(
        master,
        units,
        [
            _Change(master.ctx, ids[0], apb.CONTAINER_STATE_RUNNING, 1),
            _Change(master.ctx, ids[1], apb.CONTAINER_STATE_RUNNING, 1),
            refuses,
        ],
    )
    assert outcomes[:2] == [None, None] and isinstance(outcomes[2], NotFound)
    assert units.stats.split == 1

    def connection_lost(w: Work) -> None:
        raise DatabaseUnavailable("the connection was lost", commit_unknown=True)

    first, second, lost = _all_at_once_async(
        master,
        units,
        [
            _Change(master.ctx, ids[2], apb.CONTAINER_STATE_RUNNING, 1),
            _Change(master.ctx, ids[3], apb.CONTAINER_STATE_RUNNING, 1),
            connection_lost,
        ],
    )
    assert first is None
    assert isinstance(second, DatabaseUnavailable) and second.commit_unknown
    assert isinstance(lost, DatabaseUnavailable) and lost is not second
    assert [_container(master, c).state for c in ids] == ["RUNNING", "RUNNING", "RUNNING", "ASSIGNED"]
    assert units.idle


def test_readers_and_threads_together_keep_each_ones_order_and_leave_no_batch_unwritten(
    master: Master,
) -> None:
    units = _units(master, max_batch=3)
    seen: dict[str, list[int]] = {}

    def take(sender: str, step: int) -> Callable[[Work], None]:
        return lambda _w: seen.setdefault(sender, []).append(step)

    def thread_sender(name: str) -> None:
        for step in range(20):
            units.run(take(name, step))

    async def reader(name: str, executor: ThreadPoolExecutor) -> None:
        for step in range(20):
            await units.run_async(take(name, step), executor)

    async def readers(executor: ThreadPoolExecutor) -> None:
        await asyncio.gather(*(reader(f"reader-{r}", executor) for r in range(4)))

    workers = [threading.Thread(target=thread_sender, args=(f"thread-{t}",)) for t in range(3)]
    with ThreadPoolExecutor(2) as executor:
        for worker in workers:
            worker.start()
        asyncio.run(readers(executor))
        for worker in workers:
            worker.join(timeout=60)
    assert not any(worker.is_alive() for worker in workers)
    assert seen == {
        name: list(range(20))
        for name in [*(f"thread-{t}" for t in range(3)), *(f"reader-{r}" for r in range(4))]
    }
    assert units.stats.items == 140
    assert units.idle


def test_a_reader_whose_executor_takes_no_more_work_fails_and_the_next_one_is_written(master: Master) -> None:
    units = _units(master)
    written: list[str] = []
    stopped = ThreadPoolExecutor(1)
    stopped.shutdown()

    def keep(_w: Work) -> str:
        written.append("kept")
        return "kept"

    async def both() -> tuple[object, object]:
        try:
            await units.run_async(lambda _w: written.append("lost"), stopped)
            refused: object = None
        except RuntimeError as exc:
            refused = exc
        with ThreadPoolExecutor(1) as live:
            return refused, await units.run_async(keep, live)

    refused, kept = asyncio.run(both())
    assert isinstance(refused, RuntimeError) and "no thread to write the batch" in str(refused)
    assert kept == "kept" and written == ["kept"]
    assert units.idle

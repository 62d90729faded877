"""An agent's reports in flight at once (servicers/agent_reports.py, on the agent stream's reader):
they share batches instead of waiting for one another, yet each agent's are stored in the order it
sent them, each once, and acknowledged only once stored and in order; an outage makes the failed
report and every one behind it be written again, in order; an error of a report's own ends the
stream with nothing after it stored."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

import pytest

from cairn.agent.v1 import agent_pb2 as apb
from services.master.domain.kernel.batched_units import BatchedUnits
from services.master.domain.kernel.context import Work
from services.master.domain.kernel.errors import DatabaseUnavailable, NotFound
from services.master.domain.metrics.logs import LogStore
from services.master.domain.scheduling.agent_hub import AgentLink
from services.master.servicers.agent_reports import ReportPipeline, StreamEnded
from services.master.servicers.agent_stream import AgentStreamServicer
from tests.unit.master.domain.harness import Master
from tests.unit.master.domain.test_domain_batched_units import _container, _grid

pytestmark = pytest.mark.on_each_database  # locks and transactions as each database has them

T = TypeVar("T")


def _while_the_lock_is_held(
    master: Master, units: BatchedUnits, queued: int, scenario: Callable[[], Coroutine[Any, Any, T]]
) -> T:
    """Run `scenario` on an event loop of its own thread. The master's lock is held until `queued`
    units wait behind the first batch's lead (which stops at the lock), so that they share batches."""
    with ThreadPoolExecutor(1) as loop_thread:
        master.ctx.lock.acquire()
        try:
            outcome = loop_thread.submit(asyncio.run, scenario())
            for _ in range(500):
                if units.queued >= queued:
                    break
                threading.Event().wait(0.01)
        finally:
            master.ctx.lock.release()
        return outcome.result(timeout=60)


def _acks(link: AgentLink) -> list[dict[str, int]]:
    """What the stream acknowledged to the agent, message by message."""
    sent: list[dict[str, int]] = []
    while not link.outbox.empty():
        message = link.outbox.get_nowait()
        if message is not None and message.WhichOneof("msg") == "log_ack":
            sent.append(dict(message.log_ack.acked_seq))
    return sent


def _servicer(master: Master) -> AgentStreamServicer:
    return AgentStreamServicer(master.ctx, LogStore(master.ctx), max_agents=4)


def test_an_agents_reports_share_batches_and_are_acknowledged_once_stored_in_order(master: Master) -> None:
    experiment_id, ids = _grid(master, 8)
    servicer = _servicer(master)
    sent = [
        apb.ContainerStateChanged(container_id=c, state=apb.CONTAINER_STATE_RUNNING, seq=1) for c in ids
    ] + [
        apb.ContainerStateChanged(container_id=c, state=apb.CONTAINER_STATE_TERMINATED, seq=2, exit_code=0)
        for c in ids
    ]

    async def messages() -> AsyncIterator[apb.AgentMessage]:
        for change in sent:
            yield apb.AgentMessage(container_state=change)

    link = AgentLink("a1")
    _while_the_lock_is_held(master, servicer._units, len(sent) - 1, lambda: servicer._read(link, messages()))
    # One agent's sixteen reports in two transactions (its first alone), not sixteen.
    assert (servicer._units.stats.items, servicer._units.stats.batches) == (16, 2)
    master.settle()
    for container_id in ids:
        container = _container(master, container_id)
        assert (container.state, container.exit_code, container.acked_seq) == ("TERMINATED", 0, 2)
    assert {t.state for t in master.trials(experiment_id)} == {"COMPLETED"}
    acks = _acks(link)
    # The first report's own acknowledgement, then one message for the batch of the fifteen others.
    assert acks == [{ids[0]: 1}, dict.fromkeys(ids, 2)]
    assert link.applying == 0


def _committed_report(
    committed: list[tuple[str, int]],
    agent: str,
    step: int,
    fails: Callable[[], Exception] | None = None,
    tries_failing: int = 1,
) -> Callable[[Work], None]:
    """A report that records itself once its transaction commits; `fails`: the error its first
    `tries_failing` tries raise."""
    tried = []

    def apply(w: Work) -> None:
        if fails is not None and len(tried) < tries_failing:
            tried.append(step)
            raise fails()
        w.later(lambda: committed.append((agent, step)))

    return apply


def test_an_outage_writes_the_failed_report_and_every_one_behind_it_again_in_order(master: Master) -> None:
    servicer = _servicer(master)
    units = BatchedUnits(master.ctx, max_batch=3)  # a lane's reports spread over many batches
    committed: list[tuple[str, int]] = []
    links = {name: AgentLink(name) for name in ("a", "b")}

    def lost() -> Exception:
        return DatabaseUnavailable("the connection was lost", commit_unknown=False)

    async def agent(name: str, executor: ThreadPoolExecutor) -> None:
        link = links[name]
        reports = ReportPipeline(link, units, executor, partial(servicer._apply, link))
        for step in range(12):
            fails = lost if (name, step) == ("a", 4) else None
            apply = _committed_report(committed, name, step, fails)
            await reports.submit("a report", apply, None, ack=(f"{name}-c", step + 1))
            await asyncio.sleep(0)  # the two agents' reports alternate in the queue
        await reports.settle()

    async def both() -> None:
        with ThreadPoolExecutor(2) as executor:
            await asyncio.gather(agent("a", executor), agent("b", executor))

    _while_the_lock_is_held(master, units, 23, both)
    # a4's batch (with a b report) failed whole; a's and b's later reports already queued were not
    # written until each agent had written its failed ones again.
    for name in ("a", "b"):
        assert [step for agent, step in committed if agent == name] == list(range(12))
        acked = [ack[f"{name}-c"] for ack in _acks(links[name])]
        assert acked == sorted(acked) and acked[-1] == 12
        assert links[name].applying == 0 and not links[name].closed.is_set()
    assert units.stats.split == 0
    assert units.idle


def test_a_reports_own_error_ends_the_stream_and_nothing_behind_it_is_stored(master: Master) -> None:
    servicer = _servicer(master)
    units = BatchedUnits(master.ctx)
    committed: list[tuple[str, int]] = []
    link = AgentLink("a")

    def refused() -> Exception:
        return NotFound("no such container")

    async def agent() -> None:
        with ThreadPoolExecutor(2) as executor:
            reports = ReportPipeline(link, units, executor, partial(servicer._apply, link))
            for step in range(6):
                apply = _committed_report(
                    committed, "a", step, refused if step == 2 else None, tries_failing=9
                )
                await reports.submit("a report", apply, None, ack=("c", step + 1))
            with pytest.raises(StreamEnded):
                await reports.settle()

    _while_the_lock_is_held(master, units, 5, agent)
    # Its batch was written again one by one: the reports before it stored, none after it.
    assert committed == [("a", 0), ("a", 1)]
    assert [ack["c"] for ack in _acks(link)] == [1, 2]
    assert link.closed.is_set()
    assert units.idle


def test_at_most_depth_reports_are_in_flight(master: Master) -> None:
    servicer = _servicer(master)
    units = BatchedUnits(master.ctx)
    committed: list[tuple[str, int]] = []
    link = AgentLink("a")
    seen: list[int] = []

    async def agent() -> None:
        with ThreadPoolExecutor(2) as executor:
            reports = ReportPipeline(link, units, executor, partial(servicer._apply, link), depth=3)
            for step in range(10):
                await reports.submit("a report", _committed_report(committed, "a", step), None, ack=None)
                seen.append(reports.in_flight)
            await reports.settle()
            assert reports.in_flight == 0

    asyncio.run(agent())
    assert max(seen) == 3
    assert committed == [("a", step) for step in range(10)]
    assert link.applying == 0

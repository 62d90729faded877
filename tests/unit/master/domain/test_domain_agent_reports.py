"""An agent's reports in flight at once (servicers/agent_reports.py, on the agent stream's reader):
they share batches instead of waiting for one another, yet each agent's are stored in the order it
sent them, each once, and acknowledged only once stored and in order; an outage makes the failed
report and every one behind it be written again, in order, until the outage outlasts its budget;
an error of a report's own ends the stream with nothing after it stored; the stream's other
messages wait for the reports in flight."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from sqlalchemy import func, select

from cairn.agent.v1 import agent_pb2 as apb
from services.master.domain.kernel import outage
from services.master.domain.kernel.batched_units import BatchedUnits
from services.master.domain.kernel.context import Work
from services.master.domain.kernel.errors import DatabaseUnavailable, NotFound
from services.master.domain.kernel.group_commit import GroupCommit
from services.master.domain.metrics.logs import LogStore
from services.master.domain.scheduling.agent_hub import AgentLink
from services.master.servicers.agent_reports import ReportPipeline, StreamEnded
from services.master.servicers.agent_stream import AgentStreamServicer
from services.master.store import models
from tests.unit.master.domain.harness import Master
from tests.unit.master.domain.test_domain_batched_units import _container, _grid

pytestmark = pytest.mark.on_each_database  # locks and transactions as each database has them

T = TypeVar("T")


@pytest.fixture(autouse=True)
def _short_outage_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        outage, "OUTAGE_POLICY", outage.OutagePolicy(budget_s=5.0, first_delay_s=0.01, max_delay_s=0.05)
    )


def _while_the_lock_is_held(
    master: Master,
    units: BatchedUnits,
    total: int,
    scenario: Callable[[], Coroutine[Any, Any, T]],
    then_s: float = 0.0,
) -> T:
    """Run `scenario` on an event loop of its own thread. The master's lock is held until all
    `total` units are queued, in the first batch (whose lead stops at the lock) or behind it, so
    that they share batches; and `then_s` longer."""
    with ThreadPoolExecutor(1) as loop_thread:
        master.ctx.lock.acquire()
        try:
            outcome = loop_thread.submit(asyncio.run, scenario())
            for _ in range(500):
                if units.stats.items + units.queued >= total:
                    break
                threading.Event().wait(0.01)
            threading.Event().wait(then_s)
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
    _while_the_lock_is_held(master, servicer._units, len(sent), lambda: servicer._read(link, messages()))
    # One agent's sixteen reports in two transactions (the first lead's, then the rest), not sixteen.
    assert (servicer._units.stats.items, servicer._units.stats.batches) == (16, 2)
    master.settle()
    for container_id in ids:
        container = _container(master, container_id)
        assert (container.state, container.exit_code, container.acked_seq) == ("TERMINATED", 0, 2)
    assert {t.state for t in master.trials(experiment_id)} == {"COMPLETED"}
    first, rest = _acks(link)
    # The first batch's acknowledgements (its lead took the first report, or the first few), then
    # one message for the batch of all the others: each container up to its TERMINATED.
    assert first == dict.fromkeys(ids[: len(first)], 1)
    assert rest == dict.fromkeys(ids, 2)
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


def _until_the_stream_ends(
    master: Master,
    units: BatchedUnits,
    link: AgentLink,
    committed: list[tuple[str, int]],
    *,
    steps: int,
    failing: int,
    fails: Callable[[], Exception],
    tries_failing: int,
) -> Callable[[int], Coroutine[Any, Any, None]]:
    """Agent "a" sends `steps` reports of one container, the one at `failing` raising `fails()`
    for its first `tries_failing` tries; the stream is expected to end. The scenario takes the
    number of writer threads."""

    async def agent(threads: int) -> None:
        with ThreadPoolExecutor(threads) as executor:
            reports = ReportPipeline(link, units, executor, master.ctx.stopping)
            for step in range(steps):
                apply = _committed_report(
                    committed, "a", step, fails if step == failing else None, tries_failing=tries_failing
                )
                await reports.submit("a report", apply, None, ack=("c", step + 1))
            with pytest.raises(StreamEnded):
                await reports.settle()

    return agent


def test_an_outage_writes_the_failed_report_and_every_one_behind_it_again_in_order(master: Master) -> None:
    units = BatchedUnits(master.ctx, max_batch=3)  # a lane's reports spread over many batches
    committed: list[tuple[str, int]] = []
    links = {name: AgentLink(name) for name in ("a", "b")}

    def lost() -> Exception:
        return DatabaseUnavailable("the connection was lost", commit_unknown=False)

    async def agent(name: str, executor: ThreadPoolExecutor) -> None:
        link = links[name]
        reports = ReportPipeline(link, units, executor, master.ctx.stopping)
        for step in range(12):
            fails = lost if (name, step) == ("a", 4) else None
            apply = _committed_report(committed, name, step, fails)
            await reports.submit("a report", apply, None, ack=(f"{name}-c", step + 1))
            await asyncio.sleep(0)  # the two agents' reports alternate in the queue
        await reports.settle()

    async def both() -> None:
        with ThreadPoolExecutor(2) as executor:
            await asyncio.gather(agent("a", executor), agent("b", executor))

    _while_the_lock_is_held(master, units, 24, both)
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
    units = BatchedUnits(master.ctx)
    committed: list[tuple[str, int]] = []
    link = AgentLink("a")

    def refused() -> Exception:
        return NotFound("no such container")

    scenario = _until_the_stream_ends(
        master, units, link, committed, steps=6, failing=2, fails=refused, tries_failing=9
    )
    _while_the_lock_is_held(master, units, 6, lambda: scenario(2))
    # Its batch was written again one by one: the reports before it stored, none after it.
    assert committed == [("a", 0), ("a", 1)]
    assert [ack["c"] for ack in _acks(link)] == [1, 2]
    assert link.closed.is_set()
    assert units.idle


def test_at_most_depth_reports_are_in_flight(master: Master) -> None:
    units = BatchedUnits(master.ctx)
    committed: list[tuple[str, int]] = []
    link = AgentLink("a")
    seen: list[int] = []

    async def agent() -> None:
        with ThreadPoolExecutor(2) as executor:
            reports = ReportPipeline(link, units, executor, master.ctx.stopping, depth=3)
            for step in range(10):
                await reports.submit("a report", _committed_report(committed, "a", step), None, ack=None)
                seen.append(reports.in_flight)
            await reports.settle()
            assert reports.in_flight == 0

    asyncio.run(agent())
    assert max(seen) == 3
    assert committed == [("a", step) for step in range(10)]
    assert link.applying == 0


def test_a_log_batch_waits_for_the_reports_in_flight_before_it(master: Master) -> None:
    """Log lines share their container's sequence numbers with its state changes: stored before
    the RUNNING sent ahead of them, they would make the master drop it as a resend."""
    _, (container_id,) = _grid(master, 1)
    servicer = _servicer(master)
    allocation_id = _container(master, container_id).allocation_id
    now = Timestamp()
    now.GetCurrentTime()
    lines = [
        apb.LogEntry(
            container_id=container_id, allocation_id=allocation_id, seq=seq, timestamp=now, message="x"
        )
        for seq in (2, 3)
    ]
    sent = [
        apb.AgentMessage(
            container_state=apb.ContainerStateChanged(
                container_id=container_id, state=apb.CONTAINER_STATE_RUNNING, seq=1
            )
        ),
        apb.AgentMessage(log_batch=apb.LogBatch(entries=lines)),
        apb.AgentMessage(
            container_state=apb.ContainerStateChanged(
                container_id=container_id, state=apb.CONTAINER_STATE_TERMINATED, seq=4, exit_code=0
            )
        ),
    ]

    async def messages() -> AsyncIterator[apb.AgentMessage]:
        for message in sent:
            yield message

    link = AgentLink("a1")
    # The lock holds the RUNNING back; the log batch (which does not take it) would go first.
    _while_the_lock_is_held(master, servicer._units, 1, lambda: servicer._read(link, messages()), then_s=0.5)
    container = _container(master, container_id)
    assert (container.state, container.acked_seq) == ("TERMINATED", 4)
    with master.db.read() as s:
        allocation = s.get_one(models.Allocation, allocation_id)
        assert allocation.start_time is not None  # its RUNNING was stored
        assert s.scalar(select(func.count()).select_from(models.TaskLog)) == 2
    assert [ack[container_id] for ack in _acks(link)] == [1, 3, 4]


def _state(container_id: str, state: apb.ContainerState.ValueType, seq: int) -> apb.AgentMessage:
    return apb.AgentMessage(
        container_state=apb.ContainerStateChanged(
            container_id=container_id,
            state=state,
            seq=seq,
            exit_code=0 if state == apb.CONTAINER_STATE_TERMINATED else None,
        )
    )


def test_a_log_batch_holds_back_its_containers_later_reports_and_no_one_elses(master: Master) -> None:
    """An acknowledged seq stored ahead of lines still in flight would let the agent forget those
    lines were the master to stop before storing them: a container's report after its log batch
    waits for it. Another container's report does not."""
    _, (printing, other) = _grid(master, 2)
    servicer = _servicer(master)
    now = Timestamp()
    now.GetCurrentTime()
    lines = apb.LogBatch(
        entries=[apb.LogEntry(container_id=printing, seq=seq, timestamp=now, message="x") for seq in (2, 3)]
    )
    sent = [
        _state(printing, apb.CONTAINER_STATE_RUNNING, 1),
        apb.AgentMessage(log_batch=lines),
        _state(printing, apb.CONTAINER_STATE_TERMINATED, 4),
        _state(other, apb.CONTAINER_STATE_RUNNING, 1),
    ]
    # The log store's writer waits at the gate: the batch is in flight until it opens.
    gate = threading.Event()
    write = servicer.logs._commits._write
    servicer.logs._commits._write = lambda batches: (gate.wait(10), write(batches))[1]

    async def messages() -> AsyncIterator[apb.AgentMessage]:
        for message in sent:
            yield message

    link = AgentLink("a1")
    with ThreadPoolExecutor(1) as loop_thread:
        reading = loop_thread.submit(asyncio.run, servicer._read(link, messages()))
        try:
            # The acknowledgement of a stored report goes out on the loop a moment after its
            # commit: wait for it as well as for the state, keeping what was sent meanwhile.
            acked: list[dict[str, int]] = []
            for _ in range(500):
                acked += _acks(link)
                if _container(master, other).state == "RUNNING" and acked:
                    break
                threading.Event().wait(0.01)
            # The other container's RUNNING, sent after the lines, is stored; the printing one's
            # end, sent after them too, is not.
            assert _container(master, other).state == "RUNNING"
            assert _container(master, printing).state == "RUNNING"
            assert acked == [{printing: 1}]
        finally:
            gate.set()
        reading.result(timeout=30)
    container = _container(master, printing)
    assert (container.state, container.acked_seq) == ("TERMINATED", 4)
    with master.db.read() as s:
        assert s.scalar(select(func.count()).select_from(models.TaskLog)) == 2
    # In the agent's order: the lines, then the end with the other container's RUNNING stored
    # long before (acknowledged only now, behind the lines).
    assert _acks(link) == [{printing: 3}, {printing: 4, other: 1}]
    assert link.applying == 0


def test_an_outage_that_outlasts_its_budget_ends_the_stream(
    master: Master, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outage, "OUTAGE_POLICY", outage.OutagePolicy(budget_s=0.3, first_delay_s=0.01))
    units = BatchedUnits(master.ctx)
    committed: list[tuple[str, int]] = []
    link = AgentLink("a")

    def lost() -> Exception:
        return DatabaseUnavailable("the connection was lost", commit_unknown=False)

    scenario = _until_the_stream_ends(
        master, units, link, committed, steps=3, failing=1, fails=lost, tries_failing=10_000
    )
    asyncio.run(scenario(1))
    assert committed == [("a", 0)]
    assert [ack["c"] for ack in _acks(link)] == [1]
    assert link.closed.is_set() and link.applying == 0
    assert units.idle


@pytest.mark.parametrize("seed", range(6))
def test_random_outages_and_errors_keep_each_agents_order(master: Master, seed: int) -> None:
    """Three agents' reports through batches of a random size, a tenth of their tries failing as
    outages (each failing its whole batch), some agents with a report that always fails: no
    agent's report is stored before an earlier one or twice, acknowledgements are in order and of
    stored reports only, and an agent whose reports all could be stored had them all stored."""
    chance, faults = random.Random(seed), random.Random(seed + 1000)  # the loop's, the writer's
    units = BatchedUnits(master.ctx, max_batch=chance.randint(1, 6))
    committed: list[tuple[str, int]] = []
    links = {name: AgentLink(name) for name in "abc"}
    refused_at = {name: chance.randint(0, 19) if chance.random() < 0.3 else None for name in "abc"}

    def report(name: str, step: int) -> Callable[[Work], None]:
        def apply(w: Work) -> None:
            if refused_at[name] == step:
                raise NotFound("no such container")
            if faults.random() < 0.1:
                raise DatabaseUnavailable("the connection was lost", commit_unknown=False)
            w.later(lambda: committed.append((name, step)))

        return apply

    async def agent(name: str, executor: ThreadPoolExecutor) -> None:
        reports = ReportPipeline(
            links[name], units, executor, master.ctx.stopping, depth=chance.randint(1, 8)
        )
        try:
            for step in range(20):
                await reports.submit("a report", report(name, step), None, ack=(f"{name}-c", step + 1))
                if chance.random() < 0.3:
                    await asyncio.sleep(0)
            await reports.settle()
        except StreamEnded:
            pass
        finally:
            reports.close()

    async def all_three() -> None:
        with ThreadPoolExecutor(1) as executor:
            await asyncio.gather(*(agent(name, executor) for name in "abc"))

    asyncio.run(all_three())
    for name in "abc":
        stored = [step for agent, step in committed if agent == name]
        expected = list(range(20 if refused_at[name] is None else refused_at[name]))
        assert stored == expected
        acked = [ack[f"{name}-c"] for ack in _acks(links[name])]
        assert acked == sorted(acked) and set(range(max(acked, default=0))) <= set(stored)
        assert links[name].applying == 0
    assert units.idle


@pytest.mark.parametrize("seed", range(8))
def test_random_reports_and_log_batches_keep_each_containers_order(master: Master, seed: int) -> None:
    """Three agents' reports and log batches (each about one or two of three containers) through
    two group commits of random batch sizes, as the stream's units and log store, a tenth of the
    tries of each failing as outages, and some agents with a log batch that always fails with an
    error of its own: no container's item is stored after a later one of its own, none twice; an
    agent with no such batch has all stored; one with it has nothing after it about its containers
    stored; acknowledgements go out in order, for stored items only; nothing is left behind."""
    chance, faults = random.Random(seed), random.Random(seed + 1000)
    units = BatchedUnits(master.ctx, max_batch=chance.randint(1, 6))
    committed: list[tuple[str, str, int]] = []  # (agent, container, step), in the order stored
    recording = threading.Lock()
    poisoned = {name: chance.randint(0, 29) if chance.random() < 0.4 else None for name in "abc"}
    Batch = tuple[str, tuple[str, ...], int]  # agent, containers, step

    def write_lines(batch: Sequence[Batch]) -> list[dict[str, int]]:
        if any(poisoned[name] == step for name, _, step in batch):
            raise ValueError("a line no database takes")  # split: it fails alone, every try
        if faults.random() < 0.1:
            raise DatabaseUnavailable("the connection was lost", commit_unknown=False)
        with recording:
            committed.extend((name, c, step) for name, containers, step in batch for c in containers)
        return [{f"{name}-{c}": step + 1 for c in containers} for name, containers, step in batch]

    lines: GroupCommit[Batch, dict[str, int]] = GroupCommit(write_lines, chance.randint(1, 6))
    links = {name: AgentLink(name) for name in "abc"}
    sent: dict[str, list[tuple[tuple[str, ...], int]]] = {name: [] for name in "abc"}
    pipelines: dict[str, ReportPipeline] = {}

    def report(name: str, container: str, step: int) -> Callable[[Work], None]:
        def apply(w: Work) -> None:
            if faults.random() < 0.1:
                raise DatabaseUnavailable("the connection was lost", commit_unknown=False)
            w.later(lambda: committed.append((name, container, step)))

        return apply

    async def agent(name: str, executors: tuple[ThreadPoolExecutor, ThreadPoolExecutor]) -> None:
        reports = pipelines[name] = ReportPipeline(
            links[name], units, executors[0], master.ctx.stopping, depth=chance.randint(1, 8)
        )
        try:
            for step in range(30):
                if chance.random() < 0.5 and step != poisoned[name]:
                    (container,) = chance.sample("xyz", 1)
                    sent[name].append(((container,), step))
                    await reports.submit(
                        "a report",
                        report(name, container, step),
                        None,
                        ack=(f"{name}-{container}", step + 1),
                        containers=(f"{name}-{container}",),
                    )
                else:
                    containers = tuple(chance.sample("xyz", chance.randint(1, 2)))
                    sent[name].append((containers, step))
                    item = (name, containers, step)
                    await reports.submit_logs(
                        "a log batch",
                        lambda lane, item=item: lines.submit_async(item, executors[1], lane),  # type: ignore[misc]
                        containers=[f"{name}-{c}" for c in containers],
                    )
                if chance.random() < 0.3:
                    await asyncio.sleep(0)
            await reports.settle()
            assert not reports._latest and not reports._held and not reports.in_flight
        except StreamEnded:
            assert poisoned[name] is not None
        finally:
            reports.close()

    async def all_three() -> None:
        with ThreadPoolExecutor(1) as report_writer, ThreadPoolExecutor(1) as log_writer:
            await asyncio.gather(*(agent(name, (report_writer, log_writer)) for name in "abc"))

    asyncio.run(all_three())
    for name in "abc":
        stored = [(container, step) for agent, container, step in committed if agent == name]
        assert len(stored) == len(set(stored))  # none twice
        for container in "xyz":
            steps = [step for c, step in stored if c == container]
            assert steps == sorted(steps), f"agent {name} container {container}: {steps}"
        expected = {(c, step) for containers, step in sent[name] for c in containers}
        if poisoned[name] is None:
            assert set(stored) == expected
        else:
            bad = next(containers for containers, step in sent[name] if step == poisoned[name])
            assert not {(c, step) for c, step in stored if c in bad and step >= poisoned[name]}
        acks = _acks(links[name])
        for container in "xyz":
            key = f"{name}-{container}"
            acked = [ack[key] for ack in acks if key in ack]
            seqs = [step + 1 for c, step in stored if c == container]
            assert acked == sorted(acked) and set(acked) <= set(seqs)
            if poisoned[name] is None:
                assert acked[-1:] == seqs[-1:]  # all stored in the end: acknowledged up to the last
        assert links[name].applying == 0
    assert units.idle and lines.idle

"""Agent streams (servicers/agent_stream.py, coroutines on the master's asyncio server): past
--max-agents an agent is refused at once with RESOURCE_EXHAUSTED (it retries), and its slot comes
back when a stream ends; one watch ends the streams of silent agents, and every stream at the
master's stop; an agent whose message the master is still applying is not cut off as silent,
however long the database keeps the master behind."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any, cast

import grpc
import pytest

from cairn.agent.v1 import agent_pb2 as apb
from services.master.domain.scheduling.agent_hub import AgentLink
from services.master.servicers.agent_stream import AgentStreamServicer
from tests.unit.master.servicer_double import Aborted


class _AsyncContext:
    """What the stream's coroutine asks of its call: abort with a status."""

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise Aborted(code, details)

    def add_done_callback(self, _callback: Any) -> None:
        pass


async def _drain(servicer: AgentStreamServicer, messages: AsyncIterator[apb.AgentMessage]) -> list[Any]:
    return [m async for m in servicer.Connect(messages, cast(Any, _AsyncContext()))]


async def _none() -> AsyncIterator[apb.AgentMessage]:
    for message in ():
        yield message


def test_agents_past_the_limit_are_refused_and_slots_come_back() -> None:
    # No context needed: every stream here ends before its hello.
    servicer = AgentStreamServicer(cast(Any, None), cast(Any, None), max_agents=1)
    refusals: list[Aborted] = []

    async def first_agent_while_a_second_dials() -> AsyncIterator[apb.AgentMessage]:
        with pytest.raises(Aborted) as refused:
            await _drain(servicer, _none())
        refusals.append(refused.value)
        for message in ():  # then the first agent leaves without a hello
            yield message

    async def scenario() -> None:
        assert await _drain(servicer, first_agent_while_a_second_dials()) == []
        assert refusals[0].code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "already serves 1 agents (its --max-agents)" in str(refusals[0])
        assert await _drain(servicer, _none()) == []  # the slot came back

    asyncio.run(scenario())


def _servicer(max_agents: int) -> tuple[AgentStreamServicer, SimpleNamespace]:
    """A servicer whose streams' agents count as silent after 1 s, and the context it reads."""
    ctx = SimpleNamespace(settings=SimpleNamespace(agent_heartbeat_timeout_s=1.0), stopping=threading.Event())
    return AgentStreamServicer(cast(Any, ctx), cast(Any, None), max_agents=max_agents), ctx


def _woken_by_puts(link: AgentLink) -> asyncio.Event:
    """On the loop: the event the link's sender sleeps on, set by every put (as _session wires it)."""
    ready = asyncio.Event()
    loop = asyncio.get_running_loop()
    link.wake = lambda: loop.call_soon_threadsafe(ready.set)
    return ready


def test_an_agent_is_not_cut_off_while_its_message_is_applied() -> None:
    servicer, _ctx = _servicer(max_agents=1)
    link = AgentLink("agent-1")
    link.last_heard = time.monotonic() - 100  # long past the timeout...
    link.applying = 1  # ...but the master is applying its last message
    later = apb.MasterMessage(log_ack=apb.LogAck(acked_seq={"c": 1}))

    async def scenario() -> None:
        ready = _woken_by_puts(link)
        threading.Timer(1.2, link.put, args=(later,)).start()  # from another thread, as the domain
        send = servicer._send(link, ready)
        assert await anext(send) is later  # still served after more than the timeout with nothing to send
        link.applying = 0
        started = time.monotonic()
        assert [m async for m in send] == []  # silent and nothing being applied: the stream is closed
        assert time.monotonic() - started < 5

    asyncio.run(scenario())


def test_one_watch_ends_the_streams_of_silent_agents_only_and_every_stream_at_the_masters_stop() -> None:
    # The senders arm no timer of their own: the silence watch (one task for every stream) wakes
    # the sender of an agent silent past the timeout, and leaves the others asleep.
    servicer, ctx = _servicer(max_agents=3)
    silent, heard, busy = AgentLink("silent"), AgentLink("heard"), AgentLink("busy")
    silent.last_heard = time.monotonic() - 100
    busy.last_heard = time.monotonic() - 100
    busy.applying = 1  # the master is behind on its message: not silent
    sent: dict[str, list[apb.MasterMessage]] = {"silent": [], "heard": [], "busy": []}

    async def serve(link: AgentLink) -> None:
        ready = _woken_by_puts(link)
        async for message in servicer._send(link, ready):
            sent[link.agent_id].append(message)

    async def scenario() -> None:
        senders = {link.agent_id: asyncio.create_task(serve(link)) for link in (silent, heard, busy)}
        started = time.monotonic()
        await senders["silent"]
        assert time.monotonic() - started < 2  # within a look or two of the watch
        for _ in range(4):  # the others stay open over several looks while heard (or applied)
            heard.heard()
            await asyncio.sleep(0.5)
        assert not senders["heard"].done() and not senders["busy"].done()
        late = apb.MasterMessage(log_ack=apb.LogAck(acked_seq={"c": 2}))
        heard.put(late)
        for _ in range(100):
            if sent["heard"]:
                break
            await asyncio.sleep(0.01)
        assert sent == {"silent": [], "heard": [late], "busy": []}  # woken by the put, not the watch
        ctx.stopping.set()  # the master stops: every sender ends, none taken for silent
        await asyncio.wait_for(asyncio.gather(senders["heard"], senders["busy"]), 2)
        await asyncio.sleep(0.6)
        assert servicer._silence._task is not None and servicer._silence._task.done()  # none watched

    asyncio.run(scenario())


def test_an_agent_heard_after_the_watch_found_it_silent_keeps_its_stream() -> None:
    # The watch only wakes the sender; the sender looks again and finds the agent heard meanwhile.
    servicer, _ctx = _servicer(max_agents=1)
    link = AgentLink("late")

    async def scenario() -> None:
        ready = _woken_by_puts(link)
        sender = asyncio.create_task(_collect(servicer._send(link, ready)))
        await asyncio.sleep(0.01)  # the sender sleeps
        link.last_heard = time.monotonic() - 100
        servicer._silence.check()  # finds the agent silent and wakes its sender...
        link.heard()  # ...and a heartbeat is read before the sender runs
        await asyncio.sleep(0.1)
        assert not sender.done()
        link.close()
        assert await asyncio.wait_for(sender, 2) == []

    asyncio.run(scenario())


async def _collect(messages: AsyncIterator[apb.MasterMessage]) -> list[apb.MasterMessage]:
    return [m async for m in messages]

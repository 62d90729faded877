"""Agent streams (servicers/agent_stream.py, coroutines on the master's asyncio server): past
--max-agents an agent is refused at once with RESOURCE_EXHAUSTED (it retries), and its slot comes
back when a stream ends; an agent whose message the master is still
applying is not cut off as silent, however long the database keeps the master behind."""

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


def test_an_agent_is_not_cut_off_while_its_message_is_applied() -> None:
    settings = SimpleNamespace(agent_heartbeat_timeout_s=1.0)
    ctx = SimpleNamespace(settings=settings, stopping=threading.Event())
    servicer = AgentStreamServicer(cast(Any, ctx), cast(Any, None), max_agents=1)
    link = AgentLink("agent-1")
    link.last_heard = time.monotonic() - 100  # long past the timeout...
    link.applying = True  # ...but the master is applying its last message
    later = apb.MasterMessage(log_ack=apb.LogAck(acked_seq={"c": 1}))

    async def scenario() -> None:
        ready = asyncio.Event()
        loop = asyncio.get_running_loop()
        link.wake = lambda: loop.call_soon_threadsafe(ready.set)
        threading.Timer(1.2, link.put, args=(later,)).start()  # from another thread, as the domain
        send = servicer._send(link, ready)
        assert await anext(send) is later  # still served after more than the timeout with nothing to send
        link.applying = False
        started = time.monotonic()
        assert [m async for m in send] == []  # silent and nothing being applied: the stream is closed
        assert time.monotonic() - started < 5

    asyncio.run(scenario())

"""Agent streams (servicers/agent_stream.py): past --max-agents an agent is refused at once with
RESOURCE_EXHAUSTED (it retries) instead of waiting for a server thread with every other call
behind it, and its slot comes back when a stream ends; an agent whose message the master is still
applying is not cut off as silent, however long the database keeps the master behind."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

import grpc
import pytest

from cairn.agent.v1 import agent_pb2 as apb
from services.master.domain.scheduling.agent_hub import AgentLink
from services.master.servicers.agent_stream import AgentStreamServicer
from tests.unit.master.servicer_double import Aborted, Context


def connect(
    servicer: AgentStreamServicer, messages: Iterator[apb.AgentMessage]
) -> Iterator[apb.MasterMessage]:
    return servicer.Connect(messages, cast(Any, Context()))


def test_agents_past_the_limit_are_refused_and_slots_come_back() -> None:
    # No context needed: every stream here ends before its hello.
    servicer = AgentStreamServicer(cast(Any, None), cast(Any, None), max_agents=1)
    refusals: list[Aborted] = []

    def first_agent_while_a_second_dials() -> Iterator[apb.AgentMessage]:
        with pytest.raises(Aborted) as refused:
            next(connect(servicer, iter([])))
        refusals.append(refused.value)
        yield from ()  # then the first agent leaves without a hello

    assert list(connect(servicer, first_agent_while_a_second_dials())) == []
    assert refusals[0].code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "already serves 1 agents (its --max-agents)" in str(refusals[0])
    assert list(connect(servicer, iter([]))) == []  # the slot came back


def test_an_agent_is_not_cut_off_while_its_message_is_applied() -> None:
    settings = SimpleNamespace(agent_heartbeat_timeout_s=1.0)
    ctx = SimpleNamespace(settings=settings, stopping=threading.Event())
    servicer = AgentStreamServicer(cast(Any, ctx), cast(Any, None), max_agents=1)
    link = AgentLink("agent-1")
    link.last_heard = time.monotonic() - 100  # long past the timeout...
    link.applying = True  # ...but the master is applying its last message
    later = apb.MasterMessage(log_ack=apb.LogAck(acked_seq={"c": 1}))
    threading.Timer(1.2, link.outbox.put, args=(later,)).start()
    send = servicer._send(link, cast(Any, Context()))
    assert next(send) is later  # still served after more than the timeout with nothing to send
    link.applying = False
    started = time.monotonic()
    assert list(send) == []  # silent and nothing being applied: the stream is closed
    assert time.monotonic() - started < 5

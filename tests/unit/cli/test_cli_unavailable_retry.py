"""The CLI's channel sends a call again while the master answers UNAVAILABLE, for a bounded time,
unless the master says the change may have been stored. A real gRPC server stands in for the
master, answering from a script."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from cairn.client import unavailable_retry
from cairn.client.channel import open_channel
from cairn.metadata_keys import COMMIT_UNKNOWN_KEY

METHOD = "/test.Outage/Call"


class _ScriptedMaster:
    """Answers each call with the next (code, trailing metadata) of its script, then OK."""

    def __init__(self) -> None:
        self.script: list[tuple[grpc.StatusCode, tuple[tuple[str, str], ...]]] = []
        self.calls = 0

    def handle(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        self.calls += 1
        if self.script:
            code, trailing = self.script.pop(0)
            if trailing:
                context.set_trailing_metadata(trailing)
            context.abort(code, "the database is unavailable (test)")
        return b"ok"


@pytest.fixture
def master() -> Iterator[tuple[_ScriptedMaster, str]]:
    scripted = _ScriptedMaster()
    handler = grpc.method_handlers_generic_handler(
        "test.Outage", {"Call": grpc.unary_unary_rpc_method_handler(scripted.handle)}
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield scripted, f"127.0.0.1:{port}"
    finally:
        server.stop(None)


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(unavailable_retry, "FIRST_DELAY_S", 0.01)
    monkeypatch.setattr(unavailable_retry, "MAX_DELAY_S", 0.05)


def _call(target: str) -> Any:
    channel, base = open_channel(target, token="t", unary_timeout=5)
    try:
        return channel.unary_unary(METHOD)(b"request")
    finally:
        base.close()


def test_a_call_is_sent_again_while_the_master_answers_unavailable(master: Any) -> None:
    scripted, target = master
    scripted.script = [(grpc.StatusCode.UNAVAILABLE, ())] * 3
    assert _call(target) == b"ok"
    assert scripted.calls == 4


def test_a_call_whose_change_may_be_stored_is_not_sent_again(master: Any) -> None:
    scripted, target = master
    scripted.script = [(grpc.StatusCode.UNAVAILABLE, ((COMMIT_UNKNOWN_KEY, "1"),))]
    with pytest.raises(grpc.RpcError) as caught:
        _call(target)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert scripted.calls == 1


def test_other_errors_are_not_sent_again(master: Any) -> None:
    scripted, target = master
    scripted.script = [(grpc.StatusCode.INTERNAL, ())]
    with pytest.raises(grpc.RpcError):
        _call(target)
    assert scripted.calls == 1


def test_retrying_ends_after_its_budget(master: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    scripted, target = master
    monkeypatch.setattr(unavailable_retry, "RETRY_FOR_S", 0.3)
    scripted.script = [(grpc.StatusCode.UNAVAILABLE, ())] * 10_000
    started = time.monotonic()
    with pytest.raises(grpc.RpcError) as caught:
        _call(target)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert time.monotonic() - started < 2.0
    assert scripted.calls >= 2


def test_a_master_that_cannot_be_reached_is_reported_at_once() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        target = f"127.0.0.1:{s.getsockname()[1]}"  # nobody listens here
    started = time.monotonic()
    with pytest.raises(grpc.RpcError) as caught:
        _call(target)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert time.monotonic() - started < 5.0

"""The pause between attempts to reach the master (session/reconnect_pause.py), against real gRPC
servers on loopback: it ends soon after a master that was away starts serving, not at the end of a
long backoff, and a master that could be reached gets the whole pause."""

from __future__ import annotations

import threading
import time
from concurrent import futures

import grpc
import pytest

from services.agent.session.reconnect_pause import pause_until_reachable
from services.common.channels import internal_channel
from tests.support.ports import free_port


def _serve(port: int) -> grpc.Server:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    assert server.add_insecure_port(f"127.0.0.1:{port}") == port
    server.start()
    return server


def test_the_pause_ends_when_a_master_that_was_away_starts_serving() -> None:
    port = free_port()
    channel = internal_channel(f"127.0.0.1:{port}", "token")
    server: grpc.Server | None = None
    try:
        # The master is away: the channel does not connect (the agent's stream failed).
        with pytest.raises(grpc.FutureTimeoutError):
            grpc.channel_ready_future(channel).result(timeout=0.3)
        outcome: list[bool] = []
        started = time.monotonic()
        pausing = threading.Thread(
            target=lambda: outcome.append(pause_until_reachable(channel, 30.0, threading.Event()))
        )
        pausing.start()
        time.sleep(0.5)
        server = _serve(port)
        pausing.join(timeout=40)
        took = time.monotonic() - started
        assert outcome == [True]
        # gRPC's own retries (200 ms at first) find it: the pause ends before its 30 s are out.
        assert took < 30, took
    finally:
        channel.close()
        if server is not None:
            server.stop(0)


def test_a_reachable_master_gets_the_whole_pause() -> None:
    port = free_port()
    server = _serve(port)
    channel = internal_channel(f"127.0.0.1:{port}", "token")
    try:
        grpc.channel_ready_future(channel).result(timeout=5)
        started = time.monotonic()
        assert pause_until_reachable(channel, 0.6, threading.Event()) is False
        # Reachable already (it refused, or ended the stream): no early retry to hammer it with.
        assert time.monotonic() - started >= 0.55
    finally:
        channel.close()
        server.stop(0)


def test_stopping_ends_the_pause() -> None:
    port = free_port()
    channel = internal_channel(f"127.0.0.1:{port}", "token")
    stopping = threading.Event()
    try:
        threading.Timer(0.3, stopping.set).start()
        started = time.monotonic()
        assert pause_until_reachable(channel, 30.0, stopping) is False
        assert time.monotonic() - started < 30  # ended by the stop, not its 30 s
    finally:
        channel.close()

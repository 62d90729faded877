"""The disconnect watchers (epoll on Linux, a selector elsewhere) against real socket pairs."""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Iterator

import pytest

from services.master.gateway.disconnects import (
    POLL_S,
    EpollDisconnectWatcher,
    SelectorDisconnectWatcher,
)

WATCHERS = [SelectorDisconnectWatcher]
if hasattr(select, "epoll"):
    WATCHERS.append(EpollDisconnectWatcher)  # type: ignore[arg-type]


@pytest.fixture(params=WATCHERS, ids=lambda cls: cls.__name__)
def watcher(request: pytest.FixtureRequest) -> Iterator[EpollDisconnectWatcher | SelectorDisconnectWatcher]:
    w = request.param()
    yield w
    w.close()


def _pair() -> tuple[socket.socket, socket.socket]:
    server_side, client_side = socket.socketpair()
    server_side.setblocking(False)
    return server_side, client_side


def test_a_client_that_closes_cancels_its_stream(watcher) -> None:  # type: ignore[no-untyped-def]
    server_side, client_side = _pair()
    cancelled = threading.Event()
    watcher.watch(server_side, cancelled.set)
    client_side.close()
    assert cancelled.wait(4 * POLL_S)
    watcher.unwatch(server_side)
    server_side.close()


def test_a_client_that_sends_its_next_request_is_not_cancelled(watcher) -> None:  # type: ignore[no-untyped-def]
    server_side, client_side = _pair()
    cancelled = threading.Event()
    watcher.watch(server_side, cancelled.set)
    client_side.sendall(b"GET / HTTP/1.1\r\n")
    assert not cancelled.wait(3 * POLL_S)
    # The request is still there for the server to read.
    assert server_side.recv(64) == b"GET / HTTP/1.1\r\n"
    watcher.unwatch(server_side)
    server_side.close()
    client_side.close()


def test_an_unwatched_stream_is_not_cancelled_and_its_fd_can_be_watched_again(watcher) -> None:  # type: ignore[no-untyped-def]
    server_side, client_side = _pair()
    first = threading.Event()
    watcher.watch(server_side, first.set)
    watcher.unwatch(server_side)
    # A second stream on the same keep-alive connection registers the same fd again.
    second = threading.Event()
    watcher.watch(server_side, second.set)
    client_side.close()
    assert second.wait(4 * POLL_S)
    assert not first.is_set()
    watcher.unwatch(server_side)
    server_side.close()


def test_many_streams_at_once_each_see_only_their_own_client_leave(watcher) -> None:  # type: ignore[no-untyped-def]
    pairs = [_pair() for _ in range(50)]
    events = [threading.Event() for _ in pairs]
    for (server_side, _), event in zip(pairs, events, strict=True):
        watcher.watch(server_side, event.set)
    for i, (_, client_side) in enumerate(pairs):
        if i % 2 == 0:
            client_side.close()
    for i, event in enumerate(events):
        if i % 2 == 0:
            assert event.wait(4 * POLL_S), i
    for i, event in enumerate(events):
        if i % 2 == 1:
            assert not event.is_set(), i
    for server_side, client_side in pairs:
        watcher.unwatch(server_side)
        server_side.close()
        client_side.close()


def test_watching_after_close_is_ignored(watcher) -> None:  # type: ignore[no-untyped-def]
    watcher.close()
    server_side, client_side = _pair()
    cancelled = threading.Event()
    watcher.watch(server_side, cancelled.set)
    client_side.close()
    assert not cancelled.wait(2 * POLL_S)
    watcher.unwatch(server_side)
    server_side.close()

"""Noticing that the client of a streamed answer went away, even while the stream is idle.

A followed log with no new lines never writes, so a failed write would come too late: one thread
watches every streaming connection for readability instead. Readable means the client either
closed (recv gives b"") or already sent its next request (the connection lives; the stream ends in
its own time); either way the connection needs no more watching.

The watch and unwatch calls sit on every streamed request (a trial's metrics is one), so they take
no lock. With one, request threads queued behind whichever holder the interpreter had switched
away from, and a quarter of a metrics read went to waiting there. On Linux the kernel's epoll set
is the registry (its calls are thread-safe) with a dict beside it for the callbacks (its single
operations are atomic under the GIL); elsewhere a selector guarded by a lock does the same.
"""

from __future__ import annotations

import contextlib
import os
import select
import selectors
import socket
import ssl
import threading
from collections.abc import Callable

# How long one wait for events lasts: how soon close() is noticed, and, with the selector
# fallback, how soon a newly registered socket is watched.
POLL_S = 0.5


def _client_gone(sock: socket.socket) -> bool | None:
    """True: closed; False: it sent more; None: nothing to read after all."""
    try:
        if isinstance(sock, ssl.SSLSocket):
            # An HTTPS connection: SSLSocket refuses recv flags, so peek at the TCP bytes beneath
            # through a plain socket on a duplicate of its descriptor (a TLS record is "it sent
            # more"; end of stream is still b""). MSG_DONTWAIT: the duplicate shares the file's
            # blocking mode, which must stay as the connection's thread set it.
            with socket.socket(fileno=os.dup(sock.fileno())) as raw:
                return raw.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        return sock.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return None
    except (OSError, ValueError):
        return True


class _Watch:
    """One registration: its socket and what to call when the client leaves."""

    __slots__ = ("cancel", "sock")

    def __init__(self, sock: socket.socket, cancel: Callable[[], None]) -> None:
        self.sock = sock
        self.cancel = cancel


_EPOLL_MASK = select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLONESHOT if hasattr(select, "epoll") else 0


class EpollDisconnectWatcher:
    """Lock-free registrations in an epoll set, each armed for one event (EPOLLONESHOT): after it
    fires the kernel ignores the socket until its owner unregisters it, so the watcher thread never
    has to remove anything, and cannot remove a later stream's registration of a reused fd."""

    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._watches: dict[int, _Watch] = {}
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="http-stream-watch", daemon=True)
        self._thread.start()

    def watch(self, sock: socket.socket, cancel: Callable[[], None]) -> None:
        if self._closed:
            return
        fd = sock.fileno()
        self._watches[fd] = _Watch(sock, cancel)
        try:
            self._epoll.register(fd, _EPOLL_MASK)
        except FileExistsError:  # left registered by a stream that never unwatched
            self._epoll.modify(fd, _EPOLL_MASK)
        except (OSError, ValueError):
            self._watches.pop(fd, None)  # closed meanwhile (or the watcher is): nothing to watch

    def unwatch(self, sock: socket.socket) -> None:
        fd = sock.fileno()
        if fd < 0:
            return
        # The fd cannot be reused before this returns: the connection is closed after its stream.
        self._watches.pop(fd, None)
        with contextlib.suppress(OSError, ValueError):
            self._epoll.unregister(fd)

    def close(self) -> None:
        self._closed = True
        self._thread.join(timeout=2 * POLL_S + 1)

    def _run(self) -> None:
        try:
            while not self._closed:
                for fd, _events in self._epoll.poll(POLL_S):
                    watch = self._watches.get(fd)
                    if watch is None:
                        continue
                    gone = _client_gone(watch.sock)
                    if gone:
                        # A stream that ended in the meantime has nothing left to cancel; its
                        # cancel is then a no-op, whichever connection holds the fd now.
                        watch.cancel()
                    elif gone is None:  # woken for nothing: arm the one-shot registration again
                        with contextlib.suppress(OSError, ValueError):
                            self._epoll.modify(fd, _EPOLL_MASK)
        finally:
            self._epoll.close()


class SelectorDisconnectWatcher:
    """The same for platforms without epoll: a selector whose key table a lock guards."""

    def __init__(self) -> None:
        self._selector = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="http-stream-watch", daemon=True)
        self._thread.start()

    def watch(self, sock: socket.socket, cancel: Callable[[], None]) -> None:
        # Watched from the selector's next pass, at most POLL_S later: waking it per stream cost
        # more than the watching.
        with self._lock:
            if not self._closed:
                self._selector.register(sock, selectors.EVENT_READ, _Watch(sock, cancel))

    def unwatch(self, sock: socket.socket) -> None:
        with self._lock, contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(sock)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._thread.join(timeout=2 * POLL_S + 1)

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    self._selector.close()
                    return
                has_sockets = bool(self._selector.get_map())
            if not has_sockets:  # select() on an empty set may fail; nothing to wait for
                threading.Event().wait(POLL_S)
                continue
            for key, _ in self._selector.select(timeout=POLL_S):
                self._check(key)

    def _check(self, key: selectors.SelectorKey) -> None:
        watch = key.data
        gone = _client_gone(watch.sock)
        if gone is None:
            return
        with self._lock:
            # Only a registration that is still this one: the stream may have ended (and its fd
            # been reused) since select() returned.
            try:
                if self._selector.get_key(watch.sock).data is not watch:
                    return
            except (KeyError, ValueError):
                return
            self._selector.unregister(watch.sock)
        if gone:
            watch.cancel()


DisconnectWatcher = EpollDisconnectWatcher if hasattr(select, "epoll") else SelectorDisconnectWatcher

"""Bounds on the master's HTTP server: open connections, and ordinary requests handled at once.

The server gives each connection a thread, which is what long-lived exchanges need (followed log
streams, the task proxy's websockets and relays) but lets a flood of ordinary requests start
threads without end, all contending for the database. So:
  * at most `max_connections` connections are open at once; one more is refused at accept
    (a 503 on plain HTTP, closed under TLS) without a thread;
  * at most `workers` ordinary requests are handled at once; one more waits up to
    `queue_timeout_s` for a turn, then gets 503 with Retry-After. Long-lived exchanges do not take
    a turn: they are bounded by their own pools (log followers: --max-log-followers) or by their
    connection (the proxy), and must not starve or be starved by ordinary calls.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

# Long enough to ride out a burst, short enough that a client learns of overload in time.
QUEUE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class HttpLimits:
    workers: int = 64
    max_connections: int = 4096
    queue_timeout_s: float = QUEUE_TIMEOUT_S

    def per_process(self, processes: int) -> HttpLimits:
        """Each process's share when `processes` serve the same port (gateway/public_server.py)."""
        return HttpLimits(
            workers=max(1, self.workers // processes),
            max_connections=max(1, self.max_connections // processes),
            queue_timeout_s=self.queue_timeout_s,
        )


class RequestTurns:
    """Turns for ordinary requests: `workers` at once, the rest queue for a while."""

    def __init__(self, workers: int, queue_timeout_s: float) -> None:
        self._turns = threading.BoundedSemaphore(workers)
        self._queue_timeout_s = queue_timeout_s

    def take(self) -> bool:
        """A turn, waiting up to the queue timeout; False when none came."""
        return self._turns.acquire(timeout=self._queue_timeout_s)

    def give_back(self) -> None:
        self._turns.release()


class ConnectionCount:
    """Open connections, refused beyond `limit`."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._open = 0
        self._lock = threading.Lock()

    def try_open(self) -> bool:
        with self._lock:
            if self._open >= self._limit:
                return False
            self._open += 1
            return True

    def closed(self) -> None:
        with self._lock:
            self._open -= 1

    @property
    def open(self) -> int:
        with self._lock:
            return self._open


def is_long_lived(path: str, headers: object) -> bool:
    """Whether a request opens a long-lived exchange rather than asking an ordinary question: a
    followed stream (Determined's `?follow=true`), anything through the task proxy, an upgrade to a
    websocket. Health checks are answered whatever the load, so they count as none either."""
    parts = urlsplit(path)
    if parts.path.startswith("/proxy/") or parts.path in ("/healthz", "/health"):
        return True
    if getattr(headers, "get", lambda _key: None)("Upgrade"):
        return True
    follow = parse_qs(parts.query).get("follow", [])
    return any(value.lower() in ("true", "1") for value in follow)

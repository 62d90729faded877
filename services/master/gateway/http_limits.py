"""Bounds on the master's public HTTP port, per process (public_server.py, asgi_app.py): open
connections, and ordinary requests handled at once.

Ordinary requests run in threads and contend for the database; a flood of them must queue, not
pile up. Long-lived exchanges (followed log streams, the task proxy's exchanges, websockets and
tunnels) hold a connection for long but little else. So:
  * at most `max_connections` connections are open at once; one more is answered 503 (uvicorn's
    limit_concurrency);
  * at most `workers` ordinary requests are handled at once; one more waits up to
    `queue_timeout_s` for a turn, then gets 503 with Retry-After. Long-lived exchanges do not take
    a turn: they are bounded by their own pools (log followers: --max-log-followers) or by their
    connection (the proxy), and must not starve or be starved by ordinary calls.
"""

from __future__ import annotations

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

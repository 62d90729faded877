"""Failed logins, counted per user and per client address, to slow password guessing.

Each key ("user:NAME", "address:IP") keeps the times of its recent failures. Once a key has its
limit of failures within the window, logins for it are refused (RESOURCE_EXHAUSTED, or 429 over
REST) until its oldest counted failure leaves the window; the reply says when. A refused attempt is
not checked at all, so guessing during the pause learns nothing. A successful login clears its
user's failures (the user proved the password); the address keeps its count, so one address cannot
reset its own count by also knowing one account. Memory is bounded: at most MAX_TRACKED_KEYS keys,
the least recently failed dropped first, each holding at most its limit of times.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote

from services.common.errors import ResourceExhausted

# Enough for every user and address of a large organisation failing at once; past it the
# longest-quiet key is forgotten (about 100 bytes a failure: a few MB at most).
MAX_TRACKED_KEYS = 10_000


@dataclass(frozen=True)
class LoginLimits:
    # A person mistyping a password fails a few times; ten in a window is guessing.
    failures_per_user: int = 10
    # Several people behind one NAT address may each mistype: a looser limit per address.
    failures_per_address: int = 30
    window_s: float = 60.0


class LoginLimiter:
    def __init__(self, limits: LoginLimits, clock: Callable[[], float] = time.monotonic) -> None:
        self._limits = limits
        self._clock = clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def _keys(self, username: str, address: str) -> list[tuple[str, int]]:
        keys = [(f"user:{username}", self._limits.failures_per_user)]
        if address:
            keys.append((f"address:{address}", self._limits.failures_per_address))
        return keys

    def check(self, username: str, address: str) -> None:
        """Raise ResourceExhausted while the user or the address is paused."""
        now = self._clock()
        with self._lock:
            for key, limit in self._keys(username, address):
                times = self._recent(key, now)
                if times is not None and len(times) >= limit:
                    wait = max(1, math.ceil(times[0] + self._limits.window_s - now))
                    what = key.replace(":", " ", 1)
                    raise ResourceExhausted(
                        f"too many failed logins for {what} ({len(times)} in {self._limits.window_s:g}s): "
                        f"retry in {wait}s"
                    )

    def failed(self, username: str, address: str) -> None:
        now = self._clock()
        with self._lock:
            for key, limit in self._keys(username, address):
                times = self._recent(key, now)
                if times is None:
                    times = deque(maxlen=limit)
                    self._failures[key] = times
                times.append(now)
                self._failures.move_to_end(key)
            while len(self._failures) > MAX_TRACKED_KEYS:
                self._failures.popitem(last=False)

    def succeeded(self, username: str) -> None:
        with self._lock:
            self._failures.pop(f"user:{username}", None)

    def _recent(self, key: str, now: float) -> deque[float] | None:
        """The key's failures still inside the window (None when it has none)."""
        times = self._failures.get(key)
        if times is None:
            return None
        while times and times[0] <= now - self._limits.window_s:
            times.popleft()
        if not times:
            del self._failures[key]
            return None
        return times


def client_address(peer: str) -> str:
    """The client's IP address from a gRPC peer ("ipv4:1.2.3.4:5678", "ipv6:[::1]:5678") or the
    REST gateway's ("http:1.2.3.4"); other forms (unix sockets) as they are. gRPC writes an IPv6
    peer's brackets %-escaped ("ipv6:%5B::1%5D:5678")."""
    kind, _, rest = peer.partition(":")
    rest = unquote(rest)
    if kind == "ipv4":
        return rest.rpartition(":")[0] or rest
    if kind == "ipv6":
        host = rest.rpartition(":")[0] or rest
        return host.strip("[]")
    if kind == "http":
        return rest
    return peer


_LOOPBACK = ("127.0.0.1", "::1")


def login_address(peer: str, forwarded_for: list[str]) -> str:
    """The address a login's failures count against. The HTTP port's worker processes
    (gateway/public_server.py) call in over loopback and name the HTTP client last in
    x-forwarded-for; only a loopback peer is taken at its word, and one that forges the header moves
    its failures to another address's count, never off the per-user count."""
    address = client_address(peer)
    if address not in _LOOPBACK or not forwarded_for:
        return address
    return forwarded_for[-1].rsplit(",", 1)[-1].strip() or address

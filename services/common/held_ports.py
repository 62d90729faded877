"""Waiting out a fixed port that is briefly held when a service comes back on it.

A service restarted on the port it had (a supervisor's restart, `cairn cluster` after a kill -9:
its agents and services know it by that address) can find the port taken for a moment. The
common case is not another server but an outgoing connection: any process's connect() picks its
source port from the same ephemeral range a port-0 bind drew the service's port from, and a
client retrying the dead service can even connect to itself on it. Linux refuses to bind a port
that a connected socket uses (EADDRINUSE, with SO_REUSEADDR and SO_REUSEPORT too), and such
holders go within seconds. So a service given a fixed port retries it for a bounded time, as
nginx does (five tries half a second apart), and fails with the port named after that. Port 0
never waits: any free port will do.
"""

from __future__ import annotations

import errno
import socket
import time
from collections.abc import Callable
from typing import TypeVar

from services.common.logging import get_logger

log = get_logger(__name__)

T = TypeVar("T")

# Long enough for a client's connection or a self-connected retry to end; short against a
# supervisor's patience (the test clusters wait 60 s for a restarted service to be ready).
HELD_PORT_WAIT_S = 20.0
HELD_PORT_INTERVAL_S = 0.25


class PortHeld(OSError):
    """The fixed port stayed in use for the whole wait."""


def bind_when_free(
    bind: Callable[[], T],
    name: str,
    host: str,
    port: int,
    *,
    wait_s: float = HELD_PORT_WAIT_S,
    interval_s: float = HELD_PORT_INTERVAL_S,
) -> T:
    """`bind()`'s result; while it raises EADDRINUSE for a fixed `port`, tried again every
    `interval_s` for up to `wait_s`. PortHeld naming the port when it stays held; other errors
    (and any error for port 0) are raised at once."""
    deadline = time.monotonic() + wait_s
    tries = 0
    while True:
        try:
            return bind()
        except OSError as exc:
            if port == 0 or exc.errno != errno.EADDRINUSE:
                raise
            tries += 1
            if time.monotonic() >= deadline:
                raise PortHeld(
                    errno.EADDRINUSE,
                    f"{name}: {host}:{port} is still in use after {wait_s:.0f} s "
                    f"({tries} tries); another process holds it",
                ) from None
            if tries == 1:
                log.warning("port in use, waiting for it", service=name, host=host, port=port, wait_s=wait_s)
            time.sleep(interval_s)


def probe_bind(host: str, port: int) -> None:
    """Bind `host:port` as gRPC's server does (SO_REUSEADDR and SO_REUSEPORT) and let it go at once:
    gRPC's add_port says only that it failed, this says whether the port is in use (EADDRINUSE)."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    address = host.strip("[]") or ("::" if family == socket.AF_INET6 else "0.0.0.0")
    try:
        infos = socket.getaddrinfo(address, port, family, socket.SOCK_STREAM)
    except socket.gaierror:
        return  # a name gRPC resolves its own way: its bind says what is wrong
    try:
        with socket.socket(infos[0][0], socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if hasattr(socket, "SO_REUSEPORT"):
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            probe.bind(infos[0][4])
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise
        # Anything else (no IPv6 here, an address not of this host) is for gRPC's bind to report.

"""Retrying calls to the master through short outages.

Every call the Core API makes is safe to repeat (metric reports carry sequence numbers, the rest
are idempotent on the master), so a failure that may be transient is retried with growing pauses
until a time budget runs out; anything else fails at once.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import grpc

from cairn.core.errors import MasterCallError

T = TypeVar("T")

TRANSIENT_CODES = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.ABORTED}
)
# A connection dropped in the middle of a call can surface as INTERNAL or UNKNOWN; these words in
# the status details tell it apart from a real server error.
_DROPPED_CONNECTION_HINTS = ("connection reset", "rst_stream", "stream removed", "socket closed", "goaway")


@dataclass(frozen=True)
class RetryPolicy:
    first_delay_s: float = 0.5
    max_delay_s: float = 15.0
    # Retrying stops once this much time has passed since the first attempt.
    give_up_after_s: float = 300.0

    def delays(self) -> Iterator[float]:
        """Pauses between attempts: doubling, capped, with jitter so that many trials that lost the
        master together do not come back in lockstep."""
        delay = self.first_delay_s
        while True:
            yield delay * random.uniform(0.8, 1.2)
            delay = min(delay * 2, self.max_delay_s)


def status_code(exc: grpc.RpcError) -> grpc.StatusCode | None:
    code = getattr(exc, "code", None)
    return code() if callable(code) else None


def status_details(exc: grpc.RpcError) -> str:
    details = getattr(exc, "details", None)
    return str(details() or "") if callable(details) else str(exc)


def is_transient(exc: grpc.RpcError) -> bool:
    code = status_code(exc)
    if code in TRANSIENT_CODES:
        return True
    if code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN):
        details = status_details(exc).lower()
        return any(hint in details for hint in _DROPPED_CONNECTION_HINTS)
    return False


def describe(exc: grpc.RpcError) -> str:
    code = status_code(exc)
    name = code.name if code is not None else "UNKNOWN"
    details = status_details(exc)
    return f"{name}: {details}" if details else name


def call_with_retry(
    attempt: Callable[[], T],
    policy: RetryPolicy,
    *,
    what: str,
    master: str,
    interrupt: threading.Event | None = None,
    on_failed_attempt: Callable[[grpc.RpcError], None] | None = None,
) -> T:
    """Run `attempt` until it succeeds, fails for good, or the policy's budget is spent.

    `interrupt` cuts the pauses short (the context is closing); the last error is raised then.
    """
    started = time.monotonic()
    attempts = 0
    delays = policy.delays()
    while True:
        attempts += 1
        try:
            return attempt()
        except grpc.RpcError as exc:
            if on_failed_attempt is not None:
                on_failed_attempt(exc)
            if not is_transient(exc):
                raise MasterCallError(
                    f"{what}: the master at {master} refused: {describe(exc)}", status_code(exc)
                )
            delay = next(delays)
            elapsed = time.monotonic() - started
            if elapsed + delay > policy.give_up_after_s:
                raise MasterCallError(
                    f"{what}: no answer from the master at {master} after {attempts} attempts "
                    f"over {elapsed:.0f}s: {describe(exc)}",
                    status_code(exc),
                )
            if interrupt is not None:
                if interrupt.wait(delay):
                    raise MasterCallError(
                        f"{what}: given up while closing after {attempts} attempts: {describe(exc)}",
                        status_code(exc),
                    )
            else:
                time.sleep(delay)

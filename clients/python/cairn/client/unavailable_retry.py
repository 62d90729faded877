"""The CLI's calls through a short outage behind the master (its database restarting, a service it
needs coming back): a unary call the master answered with UNAVAILABLE is sent again, with growing
pauses, for a bounded time; then the last answer stands.

Not sent again: a call that never reached a master (the cluster is down: the user hears so at
once, rather than after the whole budget), and a call the master marked as possibly stored
(COMMIT_UNKNOWN_KEY in its trailing metadata): sending it again could, say, create an
experiment twice. Such an answer reaches the user as is, saying the change may have been stored.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from cairn.client.errors import looks_like_transport_failure
from cairn.metadata_keys import COMMIT_UNKNOWN_KEY

# The master rides out a database outage for ~40 s before it answers UNAVAILABLE; a call that
# still meets one is tried again for this long, so a restart of a minute or so goes unnoticed.
RETRY_FOR_S = 60.0
FIRST_DELAY_S = 0.5
MAX_DELAY_S = 5.0


def _delays() -> Iterator[float]:
    delay = FIRST_DELAY_S
    while True:
        yield delay * random.uniform(0.8, 1.2)
        delay = min(delay * 2, MAX_DELAY_S)


def worth_repeating(call: Any) -> bool:
    """Whether a finished call's answer says: the master is there, but could not serve it now, and
    nothing of it was stored."""
    if call.code() != grpc.StatusCode.UNAVAILABLE:
        return False
    if looks_like_transport_failure(str(call.details() or "")):
        return False
    return not any(key == COMMIT_UNKNOWN_KEY for key, _value in call.trailing_metadata() or ())


class RetryWhileUnavailable(grpc.UnaryUnaryClientInterceptor):
    """`retry_for_s` defaults to RETRY_FOR_S, read at each call."""

    def __init__(self, retry_for_s: float | None = None, sleep: Callable[[float], None] = time.sleep) -> None:
        self._retry_for_s = retry_for_s
        self._sleep = sleep

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        budget = RETRY_FOR_S if self._retry_for_s is None else self._retry_for_s
        give_up_at = time.monotonic() + budget
        delays = _delays()
        while True:
            call = continuation(details, request)
            if not worth_repeating(call):
                return call
            delay = next(delays)
            if time.monotonic() + delay > give_up_at:
                return call
            self._sleep(delay)


def retrying_unavailable(channel: grpc.Channel) -> grpc.Channel:
    return grpc.intercept_channel(channel, RetryWhileUnavailable())

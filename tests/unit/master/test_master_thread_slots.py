"""Followed log streams are bounded (servicers/thread_slots.py): past the limit a follower is refused
at once, naming the setting; a slot comes back when its stream ends, however it ends; plain reads
need none."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from services.master.domain.kernel.errors import ResourceExhausted
from services.master.servicers.thread_slots import FollowSlots, SignalWaitSlots


def stream(slots: FollowSlots, follow: bool) -> Iterator[int]:
    with slots.hold(follow):
        yield from range(1_000)


def test_followers_past_the_limit_are_refused_and_slots_come_back() -> None:
    slots = FollowSlots(2)
    first, second = stream(slots, True), stream(slots, True)
    assert next(first) == 0 and next(second) == 0
    refusal = r"already serves 2 followed log streams and live samples .*--max-log-followers"
    with pytest.raises(ResourceExhausted, match=refusal):
        next(stream(slots, True))
    assert next(stream(slots, False)) == 0  # a plain read takes no slot
    first.close()  # the client left: gRPC closes the handler's generator
    third = stream(slots, True)
    assert next(third) == 0
    assert list(second)[-1] == 999  # ran to its end
    assert next(stream(slots, True)) == 0


def test_signal_waits_past_the_limit_are_refused_naming_the_setting() -> None:
    slots = SignalWaitSlots(1)
    with slots.hold():
        with (
            pytest.raises(
                ResourceExhausted, match=r"1 calls waiting for allocation signals .*--max-signal-waiters"
            ),
            slots.hold(),
        ):
            pass
        with slots.hold(needed=False):  # a call that answers at once takes none
            pass
    with slots.hold():
        pass

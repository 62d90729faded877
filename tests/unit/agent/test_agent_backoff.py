"""Reconnect delays: 0.5 s doubling to a 10 s cap, with jitter."""

from __future__ import annotations

from services.agent.session.backoff import Backoff


def test_delays_double_up_to_the_cap_within_their_jitter_range() -> None:
    highest = Backoff(rand=lambda low, high: high)
    assert [highest.next_delay() for _ in range(7)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    lowest = Backoff(rand=lambda low, high: low)
    assert [lowest.next_delay() for _ in range(3)] == [0.25, 0.5, 1.0]


def test_real_jitter_stays_in_range_and_reset_starts_over() -> None:
    backoff = Backoff()
    for attempt in range(40):
        ceiling = min(10.0, 0.5 * 2**attempt)
        assert ceiling / 2 <= backoff.next_delay() <= ceiling
    backoff.reset()
    assert backoff.next_delay() <= 0.5

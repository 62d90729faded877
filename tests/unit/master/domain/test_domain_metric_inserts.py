"""metric_inserts.MetricInserts: a read counts as read for good only what no insert still on its way
can fall below."""

from __future__ import annotations

from services.master.domain.kernel.metric_inserts import MetricInserts


def test_with_nothing_on_its_way_a_read_is_read_for_good_up_to_its_highest_id() -> None:
    inserts = MetricInserts()
    start = inserts.read_start()
    assert inserts.read_for_good(start, 10) == 10


def test_an_insert_on_its_way_holds_the_mark_at_what_was_seen_as_it_began() -> None:
    inserts = MetricInserts()
    inserts.read_for_good(inserts.read_start(), 10)  # a reader has seen up to 10
    token = inserts.begin()  # its ids are above 10
    start = inserts.read_start()
    assert inserts.read_for_good(start, 25) == 10  # 11-25 may have a gap it fills later
    inserts.end(token)
    assert inserts.read_for_good(inserts.read_start(), 25) == 25


def test_an_insert_begun_during_a_read_holds_the_mark_at_what_was_seen_when_the_read_began() -> None:
    inserts = MetricInserts()
    inserts.read_for_good(inserts.read_start(), 10)
    start = inserts.read_start()
    token = inserts.begin()  # may take its ids before the read's snapshot, and commit after it
    inserts.end(token)  # even when it is over by the read's end
    assert inserts.read_for_good(start, 30) == 10
    assert inserts.read_for_good(inserts.read_start(), 30) == 30


def test_the_lowest_mark_of_several_holds() -> None:
    inserts = MetricInserts()
    first = inserts.begin()  # began when nothing was seen
    inserts.read_for_good(inserts.read_start(), 10)
    second = inserts.begin()
    assert inserts.read_for_good(inserts.read_start(), 20) == 0
    inserts.end(first)
    assert inserts.read_for_good(inserts.read_start(), 20) == 10
    inserts.end(second)
    assert inserts.read_for_good(inserts.read_start(), 20) == 20

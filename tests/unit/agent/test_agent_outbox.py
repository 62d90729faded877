"""The outbox: seq order per container, batching, acknowledgements, resending, bounded memory."""

from __future__ import annotations

from services.agent.containers.outbox import Outbox
from services.agent.runtime.events import Event, LogEvent, StateEvent


def logs(first: int, count: int) -> list[tuple[Event, int]]:
    return [(LogEvent(seq, 0.0, "stdout", f"m{seq}"), seq * 10) for seq in range(first, first + count)]


def state(seq: int, name: str) -> tuple[Event, int]:
    return (StateEvent(seq, 0.0, name), seq * 10)


def seqs_of(outbox: Outbox) -> list[list[int]]:
    return [[e.seq for e in d.events] for d in outbox.take(max_deliveries=100)]


def test_state_changes_and_log_batches_go_out_in_seq_order() -> None:
    outbox = Outbox(max_batch=3)
    outbox.open("c", "a")
    outbox.add("c", [state(1, "ASSIGNED"), *logs(2, 4), state(6, "TERMINATED")])
    deliveries = outbox.take(max_deliveries=100)
    assert [[e.seq for e in d.events] for d in deliveries] == [[1], [2, 3, 4], [5], [6]]
    assert [d.is_state for d in deliveries] == [True, False, False, True]
    assert all(d.allocation_id == "a" for d in deliveries)
    assert outbox.take() == []


def test_acknowledged_events_are_dropped_and_the_rest_resent_after_rewind() -> None:
    outbox = Outbox()
    outbox.open("c", "a")
    outbox.add("c", logs(1, 5))
    assert seqs_of(outbox) == [[1, 2, 3, 4, 5]]
    assert outbox.ack("c", 3) == (3, 30)
    assert outbox.ack("c", 2) is None
    epoch = outbox.rewind()
    assert seqs_of(outbox) == [[4, 5]]
    assert outbox.pending("c") == 2
    # A sender of an older stream gets nothing once a newer stream rewound.
    newer = outbox.rewind()
    assert outbox.take(epoch) == []
    assert [[e.seq for e in d.events] for d in outbox.take(newer)] == [[4, 5]]


def test_events_the_master_already_has_are_not_queued() -> None:
    outbox = Outbox()
    outbox.open("c", "a", acked_seq=0, acked_offset=0)
    outbox.ack("c", 4)
    outbox.add("c", logs(1, 6))
    assert seqs_of(outbox) == [[5, 6]]
    assert outbox.ack("c", 6) == (6, 60)


def test_memory_is_bounded_per_container() -> None:
    outbox = Outbox(max_pending=5)
    outbox.open("c", "a")
    assert outbox.room("c") == 5
    outbox.add("c", logs(1, 5))
    assert outbox.room("c") == 0
    outbox.take()
    assert outbox.room("c") == 0
    outbox.ack("c", 2)
    assert outbox.room("c") == 2


def test_containers_take_turns_and_closed_ones_are_forgotten() -> None:
    outbox = Outbox(max_batch=1)
    for name in ("x", "y"):
        outbox.open(name, name)
        outbox.add(name, logs(1, 3))
    first = [d.container_id for d in outbox.take(max_deliveries=4)]
    assert first == ["x", "y", "x", "y"]
    outbox.close("x")
    assert [d.container_id for d in outbox.take(max_deliveries=10)] == ["y"]
    outbox.add("x", logs(9, 1))
    assert outbox.take() == []

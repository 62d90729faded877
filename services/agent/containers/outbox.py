"""Events waiting to reach the master, per container, in sequence order.

Each container's events go out strictly in seq order (the master treats a container's acked seq
as a high-water mark, so a later event must never overtake an earlier one). An event stays here
after it is sent, until the master acknowledges its seq; after a reconnect everything still here
is sent again (the master stores each (container, seq) once).

Memory is bounded: at most `max_pending` events per container are held. The rest wait in the
container's event file on disk, where the tailer leaves them until there is room again, so
nothing is dropped however long the master stays away.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

from services.agent.runtime.events import Event, LogEvent, StateEvent

MAX_PENDING_PER_CONTAINER = 100_000
MAX_LINES_PER_BATCH = 1000
# Keeps a batch of very long lines well inside gRPC's message limits.
MAX_BATCH_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Delivery:
    """One message's worth: a single state change, or consecutive log lines of one container."""

    container_id: str
    allocation_id: str
    events: tuple[Event, ...]

    @property
    def is_state(self) -> bool:
        return isinstance(self.events[0], StateEvent)


@dataclass
class _Pending:
    event: Event
    end_offset: int


@dataclass
class _Stream:
    allocation_id: str
    acked_seq: int
    acked_offset: int
    unsent: deque[_Pending] = field(default_factory=deque)
    inflight: deque[_Pending] = field(default_factory=deque)


class Outbox:
    def __init__(
        self, max_pending: int = MAX_PENDING_PER_CONTAINER, max_batch: int = MAX_LINES_PER_BATCH
    ) -> None:
        self._lock = threading.Lock()
        self._streams: dict[str, _Stream] = {}
        self._max_pending = max_pending
        self._max_batch = max_batch
        # Set whenever something may be ready to send; the sender waits on it.
        self.ready = threading.Event()
        # Bumped by every rewind: a sender of an older stream gets nothing more.
        self._epoch = 0

    def open(self, container_id: str, allocation_id: str, acked_seq: int = 0, acked_offset: int = 0) -> None:
        with self._lock:
            if container_id not in self._streams:
                self._streams[container_id] = _Stream(allocation_id, acked_seq, acked_offset)

    def close(self, container_id: str) -> None:
        """Forget a container: whatever it still holds will not be sent."""
        with self._lock:
            self._streams.pop(container_id, None)

    def room(self, container_id: str) -> int:
        with self._lock:
            stream = self._streams.get(container_id)
            if stream is None:
                return 0
            return max(0, self._max_pending - len(stream.unsent) - len(stream.inflight))

    def add(self, container_id: str, items: list[tuple[Event, int]]) -> None:
        """Events read from the file (each with the offset just past it), in file order."""
        if not items:
            return
        with self._lock:
            stream = self._streams.get(container_id)
            if stream is None:
                return
            for event, end_offset in items:
                if event.seq <= stream.acked_seq:
                    # Already stored by the master (known from a Welcome after a restart). Every
                    # earlier event is acknowledged too, so the acked position moves past it.
                    if not stream.unsent and not stream.inflight:
                        stream.acked_offset = max(stream.acked_offset, end_offset)
                    continue
                stream.unsent.append(_Pending(event, end_offset))
        self.ready.set()

    def ack(self, container_id: str, seq: int) -> tuple[int, int] | None:
        """The master stored everything of the container up to `seq`. Returns the new
        (acked_seq, acked_offset) when that moved, else None."""
        with self._lock:
            stream = self._streams.get(container_id)
            if stream is None or seq <= stream.acked_seq:
                return None
            stream.acked_seq = seq
            for queue in (stream.inflight, stream.unsent):
                while queue and queue[0].event.seq <= seq:
                    stream.acked_offset = queue.popleft().end_offset
            return stream.acked_seq, stream.acked_offset

    def acked(self, container_id: str) -> int:
        with self._lock:
            stream = self._streams.get(container_id)
            return stream.acked_seq if stream is not None else 0

    def pending(self, container_id: str) -> int:
        with self._lock:
            stream = self._streams.get(container_id)
            return len(stream.unsent) + len(stream.inflight) if stream is not None else 0

    def unsent(self, container_id: str) -> int:
        with self._lock:
            stream = self._streams.get(container_id)
            return len(stream.unsent) if stream is not None else 0

    def rewind(self) -> int:
        """A new stream: whatever was sent but not acknowledged goes out again, first. Returns the
        epoch the new stream's sender passes to take()."""
        with self._lock:
            self._epoch += 1
            for stream in self._streams.values():
                if stream.inflight:
                    stream.inflight.extend(stream.unsent)
                    stream.unsent = stream.inflight
                    stream.inflight = deque()
        self.ready.set()
        return self._epoch

    def take(self, epoch: int | None = None, max_deliveries: int = 16) -> list[Delivery]:
        """The next messages to send, marked as sent. Containers take turns so none starves.
        With `epoch`, nothing is handed out once a later rewind happened (a dying stream's sender
        must not claim events the new stream is to send)."""
        result: list[Delivery] = []
        with self._lock:
            if epoch is not None and epoch != self._epoch:
                return result
            progressed = True
            while progressed and len(result) < max_deliveries:
                progressed = False
                for container_id, stream in self._streams.items():
                    if not stream.unsent or len(result) >= max_deliveries:
                        continue
                    first = stream.unsent.popleft()
                    stream.inflight.append(first)
                    events: list[Event] = [first.event]
                    if isinstance(first.event, LogEvent):
                        size = len(first.event.message)
                        while (
                            stream.unsent
                            and len(events) < self._max_batch
                            and size < MAX_BATCH_BYTES
                            and isinstance(stream.unsent[0].event, LogEvent)
                        ):
                            item = stream.unsent.popleft()
                            stream.inflight.append(item)
                            events.append(item.event)
                            assert isinstance(item.event, LogEvent)
                            size += len(item.event.message)
                    result.append(Delivery(container_id, stream.allocation_id, tuple(events)))
                    progressed = True
        return result

"""The subscribers of this process and what each is owed.

`broadcast` (called once a unit of work commits, in its thread) offers each committed event to
every subscriber: a subscriber takes it when one of its subscriptions matches the row and its
reader may read the row (identity/access.py), and is woken. Each subscriber's queue is bounded in
messages and bytes: a client that does not keep up is marked dropped (its connection is closed;
the stock client reconnects and syncs again with what it knows), so a slow client never makes
the master's memory grow. A change that moves a row out of a subscription (a project moved to
another workspace) reaches it as a deletion.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from services.master.domain.streams.entities import Event
from services.master.domain.streams.specs import Subscription

# A subscriber's queue: messages and bytes not yet written to its client.
MAX_QUEUED_MESSAGES = 10_000
MAX_QUEUED_BYTES = 8 * 1024 * 1024
# Subscribers (connections) at once in one process.
MAX_SUBSCRIBERS = 512


class TooManySubscribers(Exception):
    """This process serves its limit of streams already."""


# Whether the subscriber's reader may read a row of this workspace.
MayRead = Callable[[int], bool]


@dataclass(frozen=True)
class Queued:
    event: Event
    text: str  # the upsert, or the deletion a move out of the subscription owes


class Subscriber:
    """One connection's subscriptions and queue. `wake` is called (from a committing thread) when
    something was queued or the subscriber was dropped; it must return at once."""

    def __init__(
        self,
        may_read: MayRead,
        wake: Callable[[], None],
        max_messages: int = MAX_QUEUED_MESSAGES,
        max_bytes: int = MAX_QUEUED_BYTES,
    ) -> None:
        self._may_read = may_read
        self._wake = wake
        self._max_messages = max_messages
        self._max_bytes = max_bytes
        self._lock = threading.Lock()
        self._subscriptions: Mapping[str, Subscription] = {}
        self._queue: deque[Queued] = deque()
        self._bytes = 0
        self.dropped = False
        self.dropped_because = ""

    def subscribe(self, subscriptions: Iterable[Subscription]) -> None:
        """Replace the subscriptions; what was queued for the old ones is dropped."""
        with self._lock:
            self._subscriptions = {s.kind.name: s for s in subscriptions if not s.empty}
            self._queue.clear()
            self._bytes = 0

    def offer(self, events: Iterable[Event]) -> None:
        woke = False
        with self._lock:
            if self.dropped or not self._subscriptions:
                return
            for event in events:
                text = self._wanted(event)
                if text is None:
                    continue
                self._queue.append(Queued(event, text))
                self._bytes += len(text)
                woke = True
                if len(self._queue) > self._max_messages or self._bytes > self._max_bytes:
                    self.dropped = True
                    self.dropped_because = (
                        f"too slow: over {self._max_messages} messages "
                        f"or {self._max_bytes} bytes waited to be sent"
                    )
                    self._queue.clear()
                    self._bytes = 0
                    break
        if woke:
            self._wake()

    def _wanted(self, event: Event) -> str | None:
        subscription = self._subscriptions.get(event.kind.name)
        if subscription is None:
            return None
        if subscription.matches(event.fields) and self._may_read(event.workspace_id):
            return event.text
        previous = event.previous_fields
        if (
            previous is not None
            and not event.deleted
            and subscription.matches(previous)
            and event.previous_workspace_id is not None
            and self._may_read(event.previous_workspace_id)
        ):
            return event.fallout_text
        return None

    def take(self) -> list[Queued]:
        with self._lock:
            taken = list(self._queue)
            self._queue.clear()
            self._bytes = 0
            return taken

    def drop(self, because: str) -> None:
        with self._lock:
            self.dropped = True
            self.dropped_because = because
            self._queue.clear()
            self._bytes = 0
        self._wake()


class Publisher:
    def __init__(self, max_subscribers: int = MAX_SUBSCRIBERS) -> None:
        self._lock = threading.Lock()
        self._subscribers: set[Subscriber] = set()
        self.max_subscribers = max_subscribers

    def add(self, subscriber: Subscriber) -> None:
        with self._lock:
            if len(self._subscribers) >= self.max_subscribers:
                raise TooManySubscribers(
                    f"this master serves {self.max_subscribers} streams already; retry later"
                )
            self._subscribers.add(subscriber)

    def remove(self, subscriber: Subscriber) -> None:
        with self._lock:
            self._subscribers.discard(subscriber)

    def active(self) -> bool:
        """Whether anyone listens (changes are read into events only then)."""
        return bool(self._subscribers)

    def count(self) -> int:
        with self._lock:
            return len(self._subscribers)

    def broadcast(self, events: list[Event]) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for subscriber in subscribers:
            subscriber.offer(events)

    def close_all(self) -> None:
        """The master stops: every subscriber is dropped (its client reconnects elsewhere)."""
        with self._lock:
            subscribers = list(self._subscribers)
        for subscriber in subscribers:
            subscriber.drop("the master is stopping: reconnect")

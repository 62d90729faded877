"""One streaming connection's conversation, whatever carries it (gateway/stream_socket.py over a
websocket): each startup message the client sends replaces its subscription and is answered with a
sync (`{"sync_id": ..., "complete": false}`, the sync's messages, `{"sync_id": ...,
"complete": true}`), then the client is sent every committed change its subscription matches, as
Determined's PublisherSet does (master/internal/stream/publisher.go).

The subscriber joins the publisher before the sync reads anything, so no change committed during
the sync is missed; a queued change no newer than the row the sync sent is not sent again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from services.common.principal import Principal
from services.master.domain.identity import access
from services.master.domain.identity.permissions import Permission
from services.master.domain.streams.entities import encode
from services.master.domain.streams.publisher import Publisher, Subscriber
from services.master.domain.streams.specs import Startup, parse_startup
from services.master.domain.streams.sync import sync_pages
from services.master.store.db import Database


class Dropped(Exception):
    """The client fell too far behind (its queue passed its bound) or the master stops."""


class StreamSession:
    """Not thread-safe: one caller drives it (start, then pending, in any order); `wake` may be
    called from any thread when something is owed."""

    def __init__(
        self,
        db: Database,
        publisher: Publisher,
        principal: Principal,
        wake: Callable[[], None],
        current: Callable[[Principal], Principal] | None = None,
    ) -> None:
        """`current`: the principal with its grants as they are now (GrantCache.attach: a
        dictionary lookup while no role, group or workspace changed), asked at each row, so a role
        taken away applies to a stream already open; without it, its grants as they are now,
        for the whole connection."""
        self._db = db
        self._publisher = publisher
        if current is None:
            with db.read() as s:
                resolved = access.resolved(principal, s)
            current = lambda _: resolved  # noqa: E731
        self._principal = principal
        self._current = current
        self.subscriber = Subscriber(self.may_read, wake)
        # (kind name, id) -> the seq of the row the last sync sent; until every older queued
        # change has passed (see pending).
        self._delivered: dict[tuple[str, int], int] = {}
        self._delivered_upto = 0
        publisher.add(self.subscriber)  # TooManySubscribers

    def may_read(self, workspace_id: int) -> bool:
        return access.may(self._current(self._principal), Permission.VIEW_PROJECT, workspace_id)

    def close(self) -> None:
        self._publisher.remove(self.subscriber)

    def start(self, text: str | bytes) -> Iterator[list[str]]:
        """Parse a startup message (InvalidArgument naming the field: nothing changes then), switch
        the subscription to it, and yield the sync's messages page by page."""
        startup = parse_startup(text)
        return self._sync(startup)

    def _sync(self, startup: Startup) -> Iterator[list[str]]:
        self.subscriber.subscribe(startup.subscriptions)
        self._delivered = {}
        yield [encode({"sync_id": startup.sync_id, "complete": False})]
        for subscription in startup.subscriptions:
            known = startup.known.get(subscription.kind.name, [])
            yield from sync_pages(self._db, subscription, known, self.may_read, self._delivered)
        self._delivered_upto = max(self._delivered.values(), default=0)
        yield [encode({"sync_id": startup.sync_id, "complete": True})]

    def pending(self) -> list[str]:
        """The changes owed since the last call; Dropped once the client fell behind."""
        if self.subscriber.dropped:
            raise Dropped(self.subscriber.dropped_because)
        texts = []
        for queued in self.subscriber.take():
            event = queued.event
            overtaken = self._delivered.get((event.kind.name, event.id), -1) >= event.seq
            if overtaken and not event.deleted and queued.text == event.text:
                continue  # the sync sent this row as it is now, or newer
            if event.seq > self._delivered_upto:
                self._delivered = {}  # every change the sync may have overtaken has passed
            texts.append(queued.text)
        return texts

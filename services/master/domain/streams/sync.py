"""A subscription's first messages, as Determined sends them between a sync's two markers
(master/internal/stream/projects.go's ProjectCollectStartupMsgs and kin): for each subscribed kind,
one deletion message naming what the client `known`s that is gone or no longer visible to it (an
empty one when nothing is), then an upsert for each matching row it may read that it does not know
or that changed after its `since`.

Rows are read in pages, and the messages come out page by page, so a large sync is never held
whole.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

from services.master.domain.reads import streamed_rows
from services.master.domain.streams import keysets
from services.master.domain.streams.entities import Event, encode
from services.master.domain.streams.keysets import Interval
from services.master.domain.streams.publisher import MayRead
from services.master.domain.streams.specs import Subscription
from services.master.store.db import Database

# Rows read per page of a sync.
PAGE_ROWS = 500


def sync_pages(
    db: Database,
    subscription: Subscription,
    known: Sequence[Interval],
    may_read: MayRead,
    delivered: dict[tuple[str, int], int],
) -> Iterator[list[str]]:
    """Pages of messages for one kind; `delivered` learns (kind, id) -> seq of each upsert sent."""
    kind = subscription.kind
    with db.read() as s:
        matched = streamed_rows.matching(s, kind.row_type, subscription.ids)
    visible = [(row_id, seq, workspace) for row_id, seq, workspace in matched if may_read(workspace)]
    gone = keysets.minus(known, [row_id for row_id, _, _ in visible])
    yield [encode({kind.delete_key: keysets.encode_intervals(gone)})]
    wanted = [
        (row_id, workspace)
        for row_id, seq, workspace in visible
        if seq > subscription.since or not keysets.contains(known, row_id)
    ]
    workspaces = dict(wanted)
    it = iter(wanted)
    while page := list(itertools.islice(it, PAGE_ROWS)):
        with db.read() as s:
            rows = streamed_rows.by_ids(s, kind.row_type, [row_id for row_id, _ in page])
            texts = []
            for row in rows:
                event = Event.upsert(kind, row, workspaces[row.id])
                delivered[(kind.name, row.id)] = row.seq
                texts.append(event.text)
        if texts:
            yield texts

"""Determined's range-encoded id sets ("1,3-5,9"): the `known` ids a client sends and the ids a
deletion message names. Kept as sorted, disjoint intervals, so that "1-1000000000" costs one pair,
not a billion ids; every operation here is linear in intervals plus the ids it is given.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from services.master.domain.kernel.errors import InvalidArgument

# The most intervals a client's set may hold (a client that knows 10,000 scattered ids sends
# 10,000 of them; the message's own size bound comes first).
MAX_INTERVALS = 100_000
# Ids are positive and fit Determined's int64 keys.
MAX_ID = 2**63 - 1

Interval = tuple[int, int]  # inclusive


def parse(text: str, field: str) -> list[Interval]:
    """The intervals of a range-encoded set, merged and sorted; InvalidArgument naming `field` for
    anything else ("a", "5-3", "-2", "1,,2")."""
    if not text:
        return []
    parts = text.split(",")
    if len(parts) > MAX_INTERVALS:
        raise InvalidArgument(f"{field}: more than {MAX_INTERVALS} ids or ranges")
    intervals: list[Interval] = []
    for part in parts:
        start_text, sep, end_text = part.partition("-")
        start = _id(start_text, field, part)
        end = _id(end_text, field, part) if sep else start
        if end < start:
            raise InvalidArgument(f"{field}: range {part!r} ends before it starts")
        intervals.append((start, end))
    return _merged(intervals)


def _id(text: str, field: str, part: str) -> int:
    if not text.isdigit() or len(text) > 19:
        raise InvalidArgument(f"{field}: {part!r} is not an id or a range of ids (e.g. 1,3-5)")
    value = int(text)
    if not 0 < value <= MAX_ID:
        raise InvalidArgument(f"{field}: {part!r}: ids are positive 64-bit integers")
    return value


def _merged(intervals: list[Interval]) -> list[Interval]:
    intervals.sort()
    merged: list[Interval] = []
    for start, end in intervals:
        if merged and start <= merged[-1][1] + 1:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def encode(ids: Iterable[int]) -> str:
    """Sorted ids as Determined writes them: runs as "a-b", single ids alone, comma-separated."""
    return encode_intervals(_merged([(i, i) for i in ids]))


def encode_intervals(intervals: Sequence[Interval]) -> str:
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in intervals)


def contains(intervals: Sequence[Interval], key: int) -> bool:
    lo, hi = 0, len(intervals)
    while lo < hi:
        mid = (lo + hi) // 2
        start, end = intervals[mid]
        if key < start:
            hi = mid
        elif key > end:
            lo = mid + 1
        else:
            return True
    return False


def minus(intervals: Sequence[Interval], present: Sequence[int]) -> list[Interval]:
    """The known intervals less the sorted `present` ids: what a client knows that is gone."""
    out: list[Interval] = []
    i = 0
    for start, end in intervals:
        while i < len(present) and present[i] < start:
            i += 1
        cursor = start
        while i < len(present) and present[i] <= end:
            if present[i] > cursor:
                out.append((cursor, present[i] - 1))
            cursor = present[i] + 1
            i += 1
        if cursor <= end:
            out.append((cursor, end))
    return out

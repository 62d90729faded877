"""Determined's paging rules: offset < 0 counts from the end; limit 0 means 100, -1 means all."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_LIMIT = 100


@dataclass(frozen=True)
class Page:
    offset: int
    limit: int  # -1: no limit
    start: int
    end: int
    total: int


def page_of(total: int, offset: int, limit: int) -> Page:
    effective_limit = DEFAULT_LIMIT if limit == 0 else limit
    start = max(0, total + offset) if offset < 0 else min(offset, total)
    end = total if effective_limit < 0 else min(total, start + effective_limit)
    return Page(offset=offset, limit=effective_limit, start=start, end=end, total=total)

"""Fetching every page of a paginated list call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

Item = TypeVar("Item")

PAGE_SIZE = 500
# A bound on the loop, far beyond any real list, in case a server's paging never advances.
MAX_PAGES = 10_000


def fetch_all(fetch_page: Callable[[int, int], Any], items_field: str) -> list[Any]:
    """Call `fetch_page(offset, limit)` until a short page or the reported total is reached."""
    items: list[Any] = []
    for _ in range(MAX_PAGES):
        response = fetch_page(len(items), PAGE_SIZE)
        page = list(getattr(response, items_field))
        items.extend(page)
        total = response.pagination.total if response.HasField("pagination") else 0
        if len(page) < PAGE_SIZE or (total and len(items) >= total):
            break
    return items

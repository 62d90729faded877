"""A store stopped inside its transaction: the thread started through `HeldInsert.start` stops
right after its first INSERT (its ids taken, its transaction open) until `release()`, so a test can
see what other writers do meanwhile."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, event


class HeldInsert:
    def __init__(self) -> None:
        self.inside = threading.Event()
        self._may_go_on = threading.Event()
        self._held: threading.Thread | None = None

    def start(self, store: Callable[[], object]) -> threading.Thread:
        """Run `store` on a thread of its own and wait until it is held after its INSERT."""
        thread = threading.Thread(target=store)
        self._held = thread
        thread.start()
        assert self.inside.wait(10), "the held store never reached its INSERT"
        return thread

    def release(self) -> None:
        self._may_go_on.set()

    def _hold(self, conn: object, cursor: object, statement: str, *_: object) -> None:
        if threading.current_thread() is self._held and statement.lstrip().upper().startswith("INSERT"):
            self.inside.set()
            self._may_go_on.wait(10)


@contextmanager
def held_insert(engine: Engine) -> Iterator[HeldInsert]:
    hold = HeldInsert()
    event.listen(engine, "after_cursor_execute", hold._hold)
    try:
        yield hold
    finally:
        hold.release()
        event.remove(engine, "after_cursor_execute", hold._hold)

"""How each fair-share pool was divided at its last scheduling pass, as the scheduler reported it:
kept in memory for the API (`GET /api/v1/resource-pools/{pool}/shares`, the WebUI) and /metrics.
The scheduler decides; the master only remembers its last answer."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class GroupDivision:
    """A workspace's (key: its id) or user's (key: "<workspace id>/<user id>") part of a pool."""

    key: str
    name: str
    # Its share by weight alone, were every group present to want the whole pool.
    nominal: int
    # What its share gives it now, given what each group wants.
    entitled: int
    held: int
    wanted: int

    @property
    def borrowed(self) -> int:
        """Slots it holds beyond its nominal share: lent to it by groups that want less."""
        return max(0, self.held - self.nominal)

    @property
    def lent(self) -> int:
        """Slots of its nominal share it does not want: lent to the others."""
        return max(0, self.nominal - self.wanted)


@dataclass(frozen=True)
class PoolDivision:
    pool: str
    workspaces: tuple[GroupDivision, ...]
    users: tuple[GroupDivision, ...]
    at: datetime


class FairShareDivisions:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pools: dict[str, PoolDivision] = {}

    def update(self, divisions: Iterable[PoolDivision]) -> bool:
        """Keep these pools' divisions; whether any differs from the one kept (its time aside)."""
        changed = False
        with self._lock:
            for division in divisions:
                before = self._pools.get(division.pool)
                if before is None or (before.workspaces, before.users) != (
                    division.workspaces,
                    division.users,
                ):
                    changed = True
                self._pools[division.pool] = division
        return changed

    def of(self, pool: str) -> PoolDivision | None:
        with self._lock:
            return self._pools.get(pool)

    def all(self) -> list[PoolDivision]:
        with self._lock:
            return [self._pools[name] for name in sorted(self._pools)]

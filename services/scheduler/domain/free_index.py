"""A pool's agents filed by what a shared fit scores them on, so that placing a request looks at a
few groups of agents instead of every agent.

A shared fit (fitting.py) takes, among the agents with enough free slots, the best-scored one, and
among equally scored agents the one at the smallest hash distance from the request (Determined's
deterministic pseudo-random tie-break), then the smallest id. Both fitting policies score an agent
on its free and usable slot counts alone, so agents with the same counts tie; and the hash distance
`(h(request) - h(agent)) mod 2**64` is smallest for the agent whose hash is the largest not above
the request's (or, when none is, the largest of all). So each group of agents with the same counts
is kept sorted by (hash, id), and the winner of a group is found by bisection.

At 1,000 agents of 8 slots a fit looked at every agent (~150 us); a burst of 8,000 requests cost
the scheduler over a second a pass (`bench.sim_agents`). The index gives the same agent as the
look at every agent (tests/unit/scheduler/test_scheduler_free_index.py compares them).
"""

from __future__ import annotations

import bisect
import functools
import hashlib
from collections.abc import Iterable, Iterator

_UINT64 = 1 << 64

# (free slots, usable slots): what both fitting policies score an agent on.
Counts = tuple[int, int]
_Entry = tuple[int, str]  # (hash of the agent id, agent id)


@functools.lru_cache(maxsize=65536)
def hash64(text: str) -> int:
    digest = hashlib.md5(text.encode(), usedforsecurity=False).digest()
    return int.from_bytes(digest[:8], "little")


def hash_distance(allocation_id: str, agent_id: str) -> int:
    """Determined's tie-break between equally scored agents: a deterministic pseudo-random
    distance, so equal agents share work instead of all ties landing on the same one."""
    return (hash64(allocation_id) - hash64(agent_id)) % _UINT64


def _hash_of(entry: _Entry) -> int:
    return entry[0]


class FreeIndex:
    """Agents that have a free slot, by their (free, usable) counts, each group sorted by (hash,
    id). Copies share the groups until they change one (copy-on-write, as PoolCapacity's copies
    share agents): a pass copies its pool for every kind of request and every preemption plan."""

    def __init__(self, groups: dict[Counts, list[_Entry]]) -> None:
        self._groups = groups
        # The groups this copy may change in place (made or copied by it).
        self._own: set[Counts] = set(groups)

    @classmethod
    def of(cls, agents: Iterable[tuple[str, Counts]]) -> FreeIndex:
        groups: dict[Counts, list[_Entry]] = {}
        for agent_id, counts in agents:
            if counts[0] > 0:
                groups.setdefault(counts, []).append((hash64(agent_id), agent_id))
        for group in groups.values():
            group.sort()
        return cls(groups)

    def copy(self) -> FreeIndex:
        # From now on both share every group: neither changes one in place.
        self._own = set()
        shared = FreeIndex(dict(self._groups))
        shared._own = set()
        return shared

    def counts(self) -> Iterator[Counts]:
        """The counts some agent has (free slots always > 0)."""
        return iter(self._groups)

    def any_agent(self, counts: Counts) -> str:
        return self._groups[counts][0][1]

    def nearest(self, counts: Counts, allocation_id: str) -> tuple[int, str]:
        """Of the agents with `counts`, the one at the smallest hash distance from
        `allocation_id`, then the smallest id: (distance, agent id)."""
        group = self._groups[counts]
        target = hash64(allocation_id)
        below = bisect.bisect_right(group, target, key=_hash_of)
        winner_hash = group[below - 1][0] if below else group[-1][0]
        first = bisect.bisect_left(group, winner_hash, key=_hash_of)
        return (target - winner_hash) % _UINT64, group[first][1]

    def move(self, agent_id: str, before: Counts, after: Counts) -> None:
        """The agent's counts changed from `before` to `after` (free 0: not filed)."""
        if before == after:
            return
        entry = (hash64(agent_id), agent_id)
        if before[0] > 0:
            group = self._owned(before)
            at = bisect.bisect_left(group, entry)
            if at == len(group) or group[at] != entry:
                raise AssertionError(f"agent {agent_id} is not filed under {before}")
            del group[at]
            if not group:
                del self._groups[before]
                self._own.discard(before)
        if after[0] > 0:
            bisect.insort(self._owned(after), entry)

    def _owned(self, counts: Counts) -> list[_Entry]:
        group = self._groups.get(counts)
        if group is None:
            group = self._groups[counts] = []
            self._own.add(counts)
        elif counts not in self._own:
            group = self._groups[counts] = list(group)
            self._own.add(counts)
        return group

"""Connected agents and the commands on their way to them.

One AgentLink per connected agent holds its outgoing queue. Commands for an agent that is away
(reconnecting) wait in a backlog and are replayed in order when it comes back: start and kill do
not commute, so order matters.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from cairn.agent.v1 import agent_pb2 as apb
from services.common.logging import get_logger

log = get_logger(__name__)

# A backlog beyond this is a sign the agent is gone for good; drop the oldest.
MAX_BACKLOG = 10_000
# Start commands awaiting the agent's acknowledgement; past this many the oldest are forgotten.
MAX_PENDING_STARTS = 100_000


@dataclass
class AgentLink:
    agent_id: str
    outbox: queue.Queue[apb.MasterMessage | None] = field(default_factory=queue.Queue)
    last_heard: float = field(default_factory=time.monotonic)
    # How many of the agent's messages the stream is still applying (one the reader awaits, and
    # its reports in flight count once): the agent is not silent then, the master is behind (its
    # messages wait unread, or unstored, while the database is busy).
    applying: int = 0
    closed: threading.Event = field(default_factory=threading.Event)
    # Why the master shut this agent out (revoked, or its credential replaced): the stream ends
    # with PERMISSION_DENIED saying so, instead of ending quietly for the agent to reconnect.
    refusal: str | None = None
    # Called after each put, from whatever thread put: the stream's sender is a coroutine on the
    # server's event loop (agent_stream.py) and sleeps until told, not on the queue.
    wake: Callable[[], None] | None = None
    # Called once when the link closes (the hub's membership changes with it).
    on_close: Callable[[], None] | None = None

    def put(self, message: apb.MasterMessage | None) -> None:
        self.outbox.put(message)
        if self.wake is not None:
            self.wake()

    def heard(self) -> None:
        self.last_heard = time.monotonic()

    @contextlib.contextmanager
    def master_behind(self) -> Iterator[None]:
        """While the master applies or stores what the agent sent: the agent counts as heard all
        along (it is the master that is not listening), and heard again once it is done."""
        self.behind()
        try:
            yield
        finally:
            self.caught_up()

    def behind(self) -> None:
        """The master has begun applying something the agent sent (see `master_behind`)."""
        self.applying += 1

    def caught_up(self) -> None:
        """What `behind` began is applied: heard again now."""
        self.applying -= 1
        self.heard()

    def close(self) -> None:
        if not self.closed.is_set():
            self.closed.set()
            if self.on_close is not None:
                self.on_close()
            self.put(None)  # wakes the sender so the stream ends


class AgentHub:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._links: dict[str, AgentLink] = {}
        self._backlog: dict[str, list[apb.MasterMessage]] = {}
        # command id -> the container a start command is for, until the agent acknowledges it.
        self._pending_starts: dict[str, str] = {}
        # Agents that said they are shutting down (they refuse new work) on their current stream.
        self._stopping: set[str] = set()
        # Bumped whenever the connected or placeable agents may have changed (a link attached,
        # closed or forgotten, an agent stopping): connected_ids and placeable_ids are kept for
        # the membership they were computed at. A scheduling pass asks three times, the
        # scheduling loop at every wake-up, and at a thousand agents each answer was a walk over
        # every link.
        self._membership = 0
        self._connected: tuple[int, frozenset[str]] | None = None
        self._placeable: tuple[int, frozenset[str]] | None = None

    def _changed(self) -> None:
        with self._lock:
            self._membership += 1

    def attach(self, agent_id: str) -> AgentLink:
        """A new stream for `agent_id`; an older stream of the same agent is closed."""
        link = AgentLink(agent_id, on_close=self._changed)
        with self._lock:
            old = self._links.get(agent_id)
            self._links[agent_id] = link
            self._stopping.discard(agent_id)
            self._membership += 1
        if old is not None:
            log.info("agent replaced its stream", agent_id=agent_id)
            old.close()
        return link

    def refuse(self, agent_id: str, reason: str) -> None:
        """Shut the agent out: its stream, if open, ends at once with `reason` (the servicer
        answers PERMISSION_DENIED), and nothing waits for it in a backlog."""
        with self._lock:
            link = self._links.get(agent_id)
            self._backlog.pop(agent_id, None)
            self._stopping.discard(agent_id)
            self._membership += 1
        if link is None:
            return
        link.refusal = reason
        link.close()
        log.info("agent shut out; closing its stream", agent_id=agent_id, reason=reason)

    def detach(self, link: AgentLink) -> bool:
        """Forget `link`; False when a newer stream of the agent had already replaced it."""
        link.close()
        with self._lock:
            if self._links.get(link.agent_id) is link:
                del self._links[link.agent_id]
                self._membership += 1
                return True
            return False

    def send(self, agent_id: str, message: apb.MasterMessage) -> None:
        with self._lock:
            if message.HasField("start"):
                self._pending_starts[message.start.command_id] = message.start.container_id
                if len(self._pending_starts) > MAX_PENDING_STARTS:
                    del self._pending_starts[next(iter(self._pending_starts))]
            link = self._links.get(agent_id)
            if link is None or link.closed.is_set():
                backlog = self._backlog.setdefault(agent_id, [])
                backlog.append(message)
                if len(backlog) > MAX_BACKLOG:
                    del backlog[0]
                return
        link.put(message)

    def acknowledged(self, command_id: str) -> str | None:
        """The agent acknowledged a command: the container it started, when it was a start."""
        with self._lock:
            return self._pending_starts.pop(command_id, None)

    def take_backlog(self, agent_id: str) -> list[apb.MasterMessage]:
        with self._lock:
            return self._backlog.pop(agent_id, [])

    def backlog_container_ids(self, agent_id: str) -> set[str]:
        """Containers whose start command is waiting for the agent to come back."""
        with self._lock:
            return {m.start.container_id for m in self._backlog.get(agent_id, []) if m.HasField("start")}

    def drop_backlog(self, agent_id: str) -> None:
        with self._lock:
            self._backlog.pop(agent_id, None)

    def last_heard(self) -> dict[str, float]:
        """When each connected agent last sent anything, as a Unix time."""
        now_wall, now_mono = time.time(), time.monotonic()
        with self._lock:
            return {
                agent_id: now_wall - (now_mono - link.last_heard)
                for agent_id, link in self._links.items()
                if not link.closed.is_set()
            }

    def connected_ids(self) -> frozenset[str]:
        with self._lock:
            if self._connected is None or self._connected[0] != self._membership:
                ids = frozenset(a for a, link in self._links.items() if not link.closed.is_set())
                self._connected = (self._membership, ids)
            return self._connected[1]

    def mark_stopping(self, agent_id: str) -> None:
        """The agent is shutting down: it takes no work until it connects again."""
        with self._lock:
            self._stopping.add(agent_id)
            self._membership += 1

    def placeable_ids(self) -> frozenset[str]:
        """Connected agents that take new work."""
        with self._lock:
            membership = self._membership
            if self._placeable is not None and self._placeable[0] == membership:
                return self._placeable[1]
        connected = self.connected_ids()
        with self._lock:
            placeable = frozenset(connected) - self._stopping
            # Kept for the membership read before: a change since has moved it on, and the next
            # call computes again.
            self._placeable = (membership, placeable)
        return placeable

    def close_all(self) -> None:
        with self._lock:
            links = list(self._links.values())
            self._links.clear()
            self._membership += 1
        for link in links:
            link.close()

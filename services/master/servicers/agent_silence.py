"""Which agents' streams went silent: one watch for every stream of the agent servicer
(agent_stream.py), instead of a timer per stream's sender (a thousand senders each arming one at
every wake-up were a tenth of the loop's time at 500 starts a second: bench/README.md)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from services.common.logging import get_logger
from services.master.domain.kernel.context import MasterContext
from services.master.domain.scheduling.agent_hub import AgentLink

log = get_logger(__name__)

# How often the silence watch looks at every stream's agent.
SILENCE_CHECK_S = 0.5


@dataclass(eq=False)  # watched by identity
class _Watched:
    link: AgentLink
    ready: asyncio.Event


class SilenceWatch:
    """Ends the streams of agents silent for longer than the heartbeat timeout: one task on the
    loop looks at every watched stream each SILENCE_CHECK_S and wakes the sender of a silent one,
    which looks again (`silent`: a message may have come meanwhile) and ends its stream. An agent
    whose message the master is still applying is not silent (AgentLink.applying: the master is
    the one behind). At the master's stop it wakes every sender. The task runs while any stream is
    watched and starts again with the next."""

    def __init__(self, ctx: MasterContext) -> None:
        self._ctx = ctx
        self._watched: set[_Watched] = set()
        self._task: asyncio.Task[None] | None = None

    def watch(self, link: AgentLink, ready: asyncio.Event) -> _Watched:
        """On the loop: watch `link`'s agent; `ready` is what its sender sleeps on."""
        watched = _Watched(link, ready)
        self._watched.add(watched)
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._task = loop.create_task(self._run(), name="agent-silence-watch")
        return watched

    def forget(self, watched: _Watched) -> None:
        self._watched.discard(watched)

    def silent(self, link: AgentLink) -> bool:
        return (
            not link.applying
            and time.monotonic() - link.last_heard > self._ctx.settings.agent_heartbeat_timeout_s
        )

    async def _run(self) -> None:
        while self._watched:
            await asyncio.sleep(SILENCE_CHECK_S)
            try:
                self.check()
            except Exception:
                # Not the end of the watch: every stream would go unwatched until the next began.
                log.exception("looking for silent agents failed")

    def check(self) -> None:
        stopping = self._ctx.stopping.is_set()
        for watched in self._watched:
            if stopping or self.silent(watched.link):
                watched.ready.set()

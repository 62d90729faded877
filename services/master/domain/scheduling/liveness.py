"""Periodic checks that turn silence into decisions: graceful stops that ran out of time become
kills, kills the agent has not confirmed (the master's, or those stopping the siblings of a failed
container) are sent again, and the containers of an agent that stayed
away longer than the reconnect window are given up (their trials are rescheduled)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import bindparam, or_, select
from sqlalchemy.orm import Session

from services.common.logging import get_logger
from services.master.domain.allocations import containers, stops
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.loops import BackgroundLoop
from services.master.domain.kernel.states import LIVE_ALLOCATION_STATES
from services.master.domain.kernel.states import AllocationState as A
from services.master.domain.scheduling import agents as agent_registry
from services.master.store import models

log = get_logger(__name__)

CHECK_INTERVAL_S = 1.0
KILL_RESEND_S = 30.0


# The two reads the loop makes every CHECK_INTERVAL_S, built once. Both name the live states
# (states.LIVE_ALLOCATION_STATES): "state != TERMINATED" read every allocation the cluster ever ran,
# twice a second (20-29 ms a read at 300,000, growing with the history; bench.history_reads).
EXPIRED_PREEMPTIONS = select(models.Allocation.id).where(
    models.Allocation.state.in_(LIVE_ALLOCATION_STATES),
    models.Allocation.preempt_requested.is_(True),
    models.Allocation.kill_requested.is_(False),
    models.Allocation.kill_deadline < bindparam("now"),
)
KILLS_OWED = select(models.Allocation.id).where(
    models.Allocation.state.in_(LIVE_ALLOCATION_STATES),
    or_(models.Allocation.kill_requested.is_(True), models.Allocation.failed_rank.is_not(None)),
)


class LivenessLoop:
    def __init__(self, ctx: MasterContext) -> None:
        self._ctx = ctx
        self._kill_sent: dict[str, float] = {}
        self._loop = BackgroundLoop(ctx, "liveness", self.check, period_s=CHECK_INTERVAL_S)

    def start(self) -> None:
        self._loop.start()

    def join(self, timeout: float) -> None:
        self._loop.join(timeout)

    def check(self) -> None:
        self._escalate_expired_preemptions()
        self._resend_kills()
        self._give_up_on_absent_agents()

    def _escalate_expired_preemptions(self) -> None:
        ctx = self._ctx
        with ctx.db.read() as s:
            expired = list(s.scalars(EXPIRED_PREEMPTIONS, {"now": utcnow()}))
        for allocation_id in expired:
            with ctx.unit_of_work() as w:
                alloc = w.session.get_one(models.Allocation, allocation_id)
                log.info("preemption timed out; killing", allocation_id=allocation_id)
                stops.request_kill(
                    ctx, w, alloc, grace_seconds=ctx.settings.kill_grace_s, reason="preemption timeout"
                )

    def _resend_kills(self) -> None:
        ctx = self._ctx
        now = utcnow().timestamp()
        with ctx.db.read() as s:
            pending = list(s.scalars(KILLS_OWED))
        self._kill_sent = {k: v for k, v in self._kill_sent.items() if k in pending}
        for allocation_id in pending:
            first = self._kill_sent.setdefault(allocation_id, now)
            if now - first < KILL_RESEND_S:
                continue
            self._kill_sent[allocation_id] = now
            with ctx.unit_of_work() as w:
                alloc = w.session.get_one(models.Allocation, allocation_id)
                log.info("kill not confirmed yet; sending again", allocation_id=allocation_id)
                stops.send_kills(ctx, w, alloc, grace_seconds=0, reason="kill not confirmed; again")

    def _give_up_on_absent_agents(self) -> None:
        ctx = self._ctx
        cutoff = utcnow() - timedelta(seconds=ctx.settings.agent_reconnect_wait_s)
        connected = ctx.hub.connected_ids()
        with ctx.db.read() as s:
            # Ids, not rows, once a second: at a thousand connected agents, loading every agent
            # to learn that all of them are here cost the idle master a share of a core.
            quiet = set(s.scalars(select(models.Agent.id).where(models.Agent.last_seen < cutoff)))
            absent = sorted(quiet - connected)
            # Only an absent agent that still holds live containers needs a decision: one given
            # up already (or that ran nothing) is not visited again every second.
            holding = set(_agents_holding_live_containers(s, absent)) if absent else set()
        for agent_id in (a for a in absent if a in holding):
            with ctx.unit_of_work() as w:
                # Read again under the unit of work: an agent that registered since the read
                # above was told to keep its containers (agents.register, under the same lock).
                agent = w.session.get(models.Agent, agent_id)
                if agent is None or agent.last_seen >= cutoff or agent_id in ctx.hub.connected_ids():
                    continue
                lost = agent_registry.live_containers_on(w, agent_id)
                for container in lost:
                    log.warning(
                        "agent did not come back; giving up its container",
                        agent_id=agent_id,
                        container_id=container.id,
                    )
                    containers.fail_container_lost(
                        ctx, w, container, f"agent {agent_id} closed with allocated containers"
                    )
            if lost:
                ctx.hub.drop_backlog(agent_id)


def _agents_holding_live_containers(s: Session, agent_ids: list[str]) -> list[str]:
    """Which of `agent_ids` hold a container that is live in a live allocation (the same test as
    agents.live_containers_on), in chunks that keep each IN list well under SQLite's bound."""
    found: list[str] = []
    for start in range(0, len(agent_ids), 500):
        chunk = agent_ids[start : start + 500]
        found.extend(
            s.scalars(
                select(models.Container.agent_id)
                .distinct()
                .join(models.Allocation, models.Allocation.id == models.Container.allocation_id)
                .where(
                    models.Container.agent_id.in_(chunk),
                    models.Container.state != A.TERMINATED,
                    models.Allocation.state != A.TERMINATED,
                )
            )
        )
    return found

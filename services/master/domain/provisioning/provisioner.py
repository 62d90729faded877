"""One pool's provisioner: each step looks at the pool (its instances as recorded, as the provider
reports them, as their agents are connected and busy, and the work waiting), asks decide() what
to do, records the decision, and then has the provider carry it out.

Order makes it crash-safe. Within one transaction the step records launch intents (new
instances, phase LAUNCHING, with fresh ids), drains, and terminations (phase TERMINATING); only
after the commit does it call the provider. A master that dies between the two finds the records
on restart: LAUNCHING instances that the provider does not report are launched again with the same
id (idempotent, so never twice), TERMINATING ones are terminated again; an instance the provider
reports that no record knows (a record lost with a restored database) is adopted, not leaked.

Provider failures (quota, credentials, a missing image) are recorded on the pool with the
provider's message and retried after a backoff that doubles up to a few minutes: never a tight
loop against a failing API.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import delete, select

from services.common.logging import get_logger
from services.master.configuration.provider import ProviderConfig
from services.master.domain.allocations import stops
from services.master.domain.identity import agent_credentials
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.states import PLACED_ALLOCATION
from services.master.domain.kernel.states import AllocationState as A
from services.master.domain.provisioning.decide import (
    Decision,
    Demand,
    DrainReason,
    Instance,
    Phase,
    decide,
)
from services.master.domain.provisioning.provider import (
    LaunchSpec,
    Provider,
    ProviderError,
    ProviderInstance,
    ProviderState,
)
from services.master.domain.scheduling import agents
from services.master.store import models

log = get_logger(__name__)

# Decisions and failures kept per pool (older ones are pruned).
EVENTS_KEPT = 200
BACKOFF_FIRST_S = 2.0
BACKOFF_MAX_S = 300.0
# The least time an instance's join token is good for, however short its starting period.
JOIN_TOKEN_MIN_S = 15 * 60
# A LAUNCHING record the provider has not reported for this long is asked for again (the master
# may have died before asking, or the provider lost the request).
RELAUNCH_AFTER_S = 30.0

_ALLOWED = {
    Phase.LAUNCHING: {Phase.STARTING, Phase.RUNNING, Phase.TERMINATING, Phase.GONE},
    Phase.STARTING: {Phase.RUNNING, Phase.TERMINATING, Phase.GONE},
    Phase.RUNNING: {Phase.DRAINING, Phase.TERMINATING, Phase.GONE},
    Phase.DRAINING: {Phase.RUNNING, Phase.TERMINATING, Phase.GONE},
    Phase.TERMINATING: {Phase.GONE},
    Phase.GONE: set(),
}


def transition(w: Work, inst: models.ProvisionedInstance, target: Phase, reason: str) -> None:
    """Every change of an instance's phase: checked, stamped, recorded with its reason."""
    current = Phase(inst.phase)
    if target == current:
        return
    if target not in _ALLOWED[current]:
        raise ValueError(f"instance {inst.id}: {current} -> {target} is not a provisioner transition")
    inst.phase = target
    if target == Phase.GONE:
        inst.ended_at = utcnow()
        # Its agent will never come back: off the agent list (unless it is, somehow, connected).
        agent = w.session.get(models.Agent, inst.id)
        if agent is not None and not agent.connected:
            w.session.delete(agent)
    record_event(w, inst.resource_pool, target.lower(), reason, inst.id)
    log.info("provisioned instance", instance_id=inst.id, phase=target.value, reason=reason)


def record_event(w: Work, pool: str, action: str, message: str, instance_id: str | None = None) -> None:
    w.session.add(
        models.ProvisionerEvent(
            resource_pool=pool, at=utcnow(), action=action, instance_id=instance_id, message=message[:2048]
        )
    )


def _prune_events(w: Work, pool: str) -> None:
    ids = list(
        w.session.scalars(
            select(models.ProvisionerEvent.id)
            .where(models.ProvisionerEvent.resource_pool == pool)
            .order_by(models.ProvisionerEvent.id.desc())
            .offset(EVENTS_KEPT)
            .limit(1000)
        )
    )
    if ids:
        w.session.execute(delete(models.ProvisionerEvent).where(models.ProvisionerEvent.id.in_(ids)))


def _seconds(at: datetime | None, now: datetime) -> float | None:
    return None if at is None else now.timestamp() - (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()


@dataclass
class Actions:
    """What the provider is asked to do once the step's transaction has committed."""

    launch: list[LaunchSpec] = field(default_factory=list)
    terminate: list[str] = field(default_factory=list)


class PoolProvisioner:
    def __init__(
        self,
        ctx: MasterContext,
        pool: str,
        config: ProviderConfig,
        provider: Provider,
        *,
        new_id: Callable[[], str] | None = None,
    ) -> None:
        self.ctx = ctx
        self.pool = pool
        self.config = config
        self.provider = provider
        self._new_id = new_id or (lambda: f"{pool}-{uuid.uuid4().hex[:10]}")
        self._retry_at = 0.0
        self._backoff_s = BACKOFF_FIRST_S
        self.last_error = ""
        # When this master asked the provider for each launch (a restarted one has asked none).
        self._asked: dict[str, float] = {}

    # ---- one step -------------------------------------------------------------------------------

    def step(self, now_s: float) -> Decision | None:
        """Look, decide, record, act. None when it waited out a backoff or the provider failed."""
        if now_s < self._retry_at:
            return None
        try:
            reported = {p.id: p for p in self.provider.list()}
        except ProviderError as exc:
            self._failed("list", str(exc), now_s)
            return None
        with self.ctx.unit_of_work() as w:
            died = self._forget_early_deaths(w, reported)
            decision, actions = self._decide_and_record(w, reported, now_s)
        failed = self._act(actions, now_s)
        if died:
            # An agent that dies before it connects usually dies again (a bad flag, a missing
            # image): its replacement waits out the backoff instead of looping.
            failed = failed or ("launch", f"{', '.join(died)} stopped before its agent connected")
        if failed:
            self._failed(*failed, now_s)
        else:
            self._backoff_s, self.last_error = BACKOFF_FIRST_S, ""
        return decision

    def _forget_early_deaths(self, w: Work, reported: dict[str, ProviderInstance]) -> list[str]:
        died = []
        for row in w.session.scalars(
            select(models.ProvisionedInstance).where(
                models.ProvisionedInstance.resource_pool == self.pool,
                models.ProvisionedInstance.phase.in_([Phase.LAUNCHING, Phase.STARTING]),
            )
        ):
            found = reported.get(row.id)
            if found is not None and found.state == ProviderState.STOPPED and row.connected_at is None:
                transition(w, row, Phase.GONE, "it stopped before its agent connected")
                died.append(row.id)
        return died

    def _decide_and_record(
        self, w: Work, reported: dict[str, ProviderInstance], now_s: float
    ) -> tuple[Decision, Actions]:
        now = datetime.fromtimestamp(now_s, UTC)
        rows = {
            r.id: r
            for r in w.session.scalars(
                select(models.ProvisionedInstance).where(
                    models.ProvisionedInstance.resource_pool == self.pool,
                    models.ProvisionedInstance.phase != Phase.GONE,
                )
            )
        }
        for found in reported.values():
            if found.id not in rows and found.state != ProviderState.STOPPED:
                rows[found.id] = self._adopt(w, found, now)
        agent_rows = {
            a.id: a for a in w.session.scalars(select(models.Agent).where(models.Agent.id.in_(list(rows))))
        }
        busy = self._busy_agents(w)
        views = [
            self._observe(w, row, reported.get(row.id), agent_rows.get(row.id), row.id in busy, now)
            for row in rows.values()
        ]
        decision = decide(self.config.limits, views, self._demand(w), now_s)
        actions = self._record(w, decision, rows, agent_rows, reported, now_s)
        if decision.acts:
            _prune_events(w, self.pool)
        return decision, actions

    def _adopt(self, w: Work, found: ProviderInstance, now: datetime) -> models.ProvisionedInstance:
        row = models.ProvisionedInstance(
            id=found.id,
            resource_pool=self.pool,
            provider=self.provider.name,
            phase=Phase.STARTING,
            launched_at=now,
            reason="adopted: the provider runs it and no record knew it",
        )
        w.session.add(row)
        record_event(w, self.pool, "adopt", row.reason, row.id)
        return row

    def _busy_agents(self, w: Work) -> set[str]:
        busy: set[str] = set()
        for placements in w.session.scalars(
            select(models.Allocation.placements).where(
                models.Allocation.resource_pool == self.pool,
                models.Allocation.state.in_(list(PLACED_ALLOCATION)),
            )
        ):
            busy.update(str(p["agent_id"]) for p in placements or [])
        return busy

    def _demand(self, w: Work) -> Demand:
        slots = w.session.scalars(
            select(models.Allocation.slots).where(
                models.Allocation.resource_pool == self.pool, models.Allocation.state == A.PENDING
            )
        )
        return Demand(tuple(int(s) for s in slots))

    def _observe(
        self,
        w: Work,
        row: models.ProvisionedInstance,
        found: ProviderInstance | None,
        agent: models.Agent | None,
        busy: bool,
        now: datetime,
    ) -> Instance:
        """The instance as decide() sees it; its record's clocks (connected, idle, away) kept up."""
        connected = bool(agent is not None and agent.connected)
        if connected:
            if row.connected_at is None:
                row.connected_at = now
            row.disconnected_since = None
            if Phase(row.phase) in (Phase.LAUNCHING, Phase.STARTING):
                transition(w, row, Phase.RUNNING, "its agent connected")
        elif row.connected_at is not None and row.disconnected_since is None:
            row.disconnected_since = now
        if connected and not busy:
            row.idle_since = row.idle_since or now
        else:
            row.idle_since = None
        if found is not None and found.state != ProviderState.STOPPED and row.phase == Phase.LAUNCHING:
            transition(w, row, Phase.STARTING, "the provider reports it")
        idle_since, away_since = _seconds(row.idle_since, now), _seconds(row.disconnected_since, now)
        launched = _seconds(row.launched_at, now) or 0.0
        return Instance(
            id=row.id,
            phase=Phase(row.phase),
            launched_at=now.timestamp() - launched,
            exists=found is not None and found.state != ProviderState.STOPPED,
            connected=connected,
            busy=busy,
            idle_since=None if idle_since is None else now.timestamp() - idle_since,
            disconnected_since=None if away_since is None else now.timestamp() - away_since,
            drain_reason=DrainReason(row.drain_reason) if row.drain_reason else None,
        )

    def _record(
        self,
        w: Work,
        decision: Decision,
        rows: dict[str, models.ProvisionedInstance],
        agent_rows: dict[str, models.Agent],
        reported: dict[str, ProviderInstance],
        now_s: float,
    ) -> Actions:
        now = datetime.fromtimestamp(now_s, UTC)
        actions = Actions()
        why = "; ".join(decision.reasons)
        for instance_id in decision.forget:
            transition(w, rows[instance_id], Phase.GONE, "the provider no longer runs it")
            if instance_id in reported:
                # Stopped but still there (an EC2 instance stopped, not terminated): terminated, so
                # that nothing is left behind to cost money.
                actions.terminate.append(instance_id)
        for instance_id in decision.terminate:
            transition(w, rows[instance_id], Phase.TERMINATING, why)
            actions.terminate.append(instance_id)
        for instance_id, reason in decision.drain:
            row = rows[instance_id]
            row.drain_reason = reason.value
            transition(w, row, Phase.DRAINING, why)
            agent = agent_rows.get(instance_id)
            if agent is not None:
                agents.change_enabled(self.ctx, w, agent, enabled=False, drain=True)
                if reason == DrainReason.SHRINK:
                    self._preempt_on(w, instance_id)
        for instance_id in decision.undrain:
            row = rows[instance_id]
            row.drain_reason = None
            row.idle_since = None
            transition(w, row, Phase.RUNNING, "taken back: work is waiting")
            agent = agent_rows.get(instance_id)
            if agent is not None:
                agents.change_enabled(self.ctx, w, agent, enabled=True, drain=False)
        # Instances still recorded as TERMINATING (a master died after recording) are asked again.
        for row in rows.values():
            if row.phase == Phase.TERMINATING and row.id not in actions.terminate and row.id in reported:
                actions.terminate.append(row.id)
        for _ in range(decision.launch):
            row = models.ProvisionedInstance(
                id=self._new_id(),
                resource_pool=self.pool,
                provider=self.provider.name,
                phase=Phase.LAUNCHING,
                launched_at=now,
                reason=why[:1024],
            )
            w.session.add(row)
            record_event(w, self.pool, "launch", why, row.id)
            actions.launch.append(self._spec(w, row.id))
        # Launches recorded before that the provider does not report yet: asked again (same id).
        for row in rows.values():
            if row.phase == Phase.LAUNCHING and row.id not in reported:
                asked = self._asked.get(row.id)
                if asked is None or now_s - asked >= RELAUNCH_AFTER_S:
                    actions.launch.append(self._spec(w, row.id))
        return actions

    def _preempt_on(self, w: Work, agent_id: str) -> None:
        """The pool must shrink: work on a retiring agent checkpoints and runs elsewhere."""
        for alloc in w.session.scalars(
            select(models.Allocation).where(
                models.Allocation.resource_pool == self.pool,
                models.Allocation.state.in_(list(PLACED_ALLOCATION)),
            )
        ):
            if any(str(p["agent_id"]) == agent_id for p in alloc.placements or []):
                stops.request_preempt(self.ctx, w, alloc, f"agent {agent_id} is retired (pool shrinks)")

    def _spec(self, w: Work, instance_id: str) -> LaunchSpec:
        # Its agent enrols with a join token made for its id alone, good while it may be starting
        # (an instance asked again gets a new one; the unused one expires).
        token = agent_credentials.mint_join_token(
            w,
            agent_id=instance_id,
            expires_in_s=max(JOIN_TOKEN_MIN_S, 2 * self.config.limits.max_agent_starting_period_s),
            created_by=f"the provisioner of pool {self.pool}",
        )
        return LaunchSpec(
            instance_id=instance_id,
            resource_pool=self.pool,
            slots=self.config.limits.instance_slots,
            join_token=token.token,
        )

    # ---- acting ---------------------------------------------------------------------------------

    def _act(self, actions: Actions, now_s: float) -> tuple[str, str] | None:
        """Ask the provider; the first failure (what, message), after trying everything."""
        failure: tuple[str, str] | None = None
        for instance_id in actions.terminate:
            try:
                self.provider.terminate(instance_id)
            except ProviderError as exc:
                failure = failure or ("terminate", f"{instance_id}: {exc}")
        for spec in actions.launch:
            try:
                self.provider.launch(spec)
                self._asked[spec.instance_id] = now_s
            except ProviderError as exc:
                failure = failure or ("launch", f"{spec.instance_id}: {exc}")
                break  # the rest would fail alike (quota, credentials): try again after the backoff
        return failure

    def _failed(self, what: str, message: str, now_s: float) -> None:
        self.last_error = f"{what} failed: {message}"
        self._retry_at = now_s + self._backoff_s
        log.warning(
            "provider failed",
            pool=self.pool,
            action=what,
            error=message,
            retry_in_s=round(self._backoff_s, 1),
        )
        with self.ctx.unit_of_work() as w:
            record_event(w, self.pool, "error", f"{self.last_error} (retrying in {self._backoff_s:.0f} s)")
            _prune_events(w, self.pool)
        self._backoff_s = min(BACKOFF_MAX_S, self._backoff_s * 2)

    @property
    def retry_in_s(self) -> float:
        return max(0.0, self._retry_at - datetime.now(UTC).timestamp())

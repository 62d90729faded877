"""Revoking an agent (`cairn agent revoke ID`): one unit of work marks its credential revoked
(identity/agent_credentials.py: refused from then on, whether it presents its credential or, in
compatibility mode, the cluster token) and treats the work on it as lost, as the liveness loop
does for an agent that did not come back (liveness.py): each live container fails as an agent
failure, so its trial restarts elsewhere as its restart policy allows. Once that has committed, the
agent's stream is closed (agent_hub.refuse: within milliseconds, the agent reads PERMISSION_DENIED
naming the revocation) and any commands still waiting for it are dropped."""

from __future__ import annotations

from dataclasses import dataclass

from services.common.logging import get_logger
from services.common.principal import Principal
from services.master.domain.allocations import containers
from services.master.domain.identity import access, agent_credentials
from services.master.domain.identity.agent_credentials import CredentialInfo
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.errors import NotFound
from services.master.domain.scheduling import agents as agent_registry
from services.master.store import models

log = get_logger(__name__)


@dataclass(frozen=True)
class Revocation:
    credential: CredentialInfo
    # The allocations whose containers on the agent were given up.
    lost_allocation_ids: list[str]


def revoke(ctx: MasterContext, principal: Principal, agent_id: str) -> Revocation:
    """Shut `agent_id` out for good; revoking it again changes nothing (and loses nothing more)."""
    access.check_cluster_by_person(principal, Permission.UPDATE_AGENTS, "revoke agents")
    agent_credentials.check_agent_id(agent_id, "agent_id")
    with ctx.unit_of_work() as w:
        known = w.session.get(models.Agent, agent_id) is not None
        if not known and not agent_credentials.holds_credential_row(w, agent_id):
            raise NotFound(f"agent {agent_id} not found (no agent registered or enrolled with that id)")
        credential, newly = agent_credentials.mark_revoked(w, agent_id, principal.username or "an admin")
        reason = f"agent {agent_id} was revoked by {credential.revoked_by}"
        lost: list[str] = []
        for container in agent_registry.live_containers_on(w, agent_id):
            containers.fail_container_lost(ctx, w, container, reason)
            lost.append(container.allocation_id)
        agent = w.session.get(models.Agent, agent_id)
        if agent is not None:
            agent.connected = False
        refusal = (
            f"{reason} at {credential.revoked_at:%Y-%m-%d %H:%M:%S} UTC: this master refuses it from now on"
            if credential.revoked_at is not None
            else reason
        )
        w.later(lambda: ctx.hub.refuse(agent_id, refusal))
        w.later(ctx.scheduler_wakeup.set)
    if newly:
        log.warning("agent revoked", agent_id=agent_id, by=credential.revoked_by, lost_allocations=lost)
    return Revocation(credential, sorted(set(lost)))

"""Agents' own credentials (domain/identity/agent_credentials.py) and revocation
(domain/scheduling/agent_revocation.py), on both databases: a join token admits one agent, before
it expires, as the id it is bound to; the enrolment secret enrols until it is rotated; a credential
speaks only as its own agent id; an id that holds a credential is enrolled anew only by a join
token made for it; revoking an agent refuses it from then on, whatever it presents, and gives up
its work (the trial restarts on another agent)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cairn.agent.v1 import agent_pb2 as apb
from services.common.principal import Principal
from services.master.domain.identity import agent_credentials as creds
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unauthenticated,
)
from services.master.domain.kernel.states import AllocationState as A
from services.master.domain.scheduling import agent_revocation
from services.master.domain.scheduling.agent_hub import AgentHub
from services.master.store import models
from tests.unit.master.domain.harness import Master

pytestmark = pytest.mark.on_each_database

CLUSTER = Principal(internal=True, username="the cluster")
# An agent on the cluster token (compatibility mode): it names its id in its hello.
ON_CLUSTER_TOKEN = Principal(internal=True, username="agent")


def _agent_of(master: Master, credential: str) -> str:
    with master.db.read() as s:
        return creds.agent_of_credential(s, credential)


def _speaks_as(master: Master, principal: Principal, agent_id: str) -> None:
    with master.db.read() as s:
        creds.check_may_speak_as(s, principal, agent_id)


def _as_agent(agent_id: str) -> Principal:
    return Principal(username=f"agent {agent_id}", agent_id=agent_id)


def test_a_join_token_admits_one_agent(master: Master) -> None:
    issued = creds.create_join_token(master.ctx, master.admin, "", 0)
    assert issued.info.expires_at - issued.info.created_at == timedelta(seconds=creds.JOIN_TOKEN_DEFAULT_S)
    enrolment = creds.enrol(master.ctx, "a1", join_token=issued.token)
    assert _agent_of(master, enrolment.credential) == "a1"
    with pytest.raises(Unauthenticated, match=f"join token {issued.info.id} was used already, by agent a1"):
        creds.enrol(master.ctx, "a2", join_token=issued.token)
    (listed,) = creds.list_join_tokens(master.ctx, master.admin, show_inactive=True)
    assert (listed.used_by_agent, listed.used_at is not None) == ("a1", True)
    assert creds.list_join_tokens(master.ctx, master.admin, show_inactive=False) == []
    # Only its hash is stored.
    with master.db.read() as s:
        row = s.get_one(models.AgentCredential, "a1")
        assert row.secret_hash == creds.secret_hash(enrolment.credential) != enrolment.credential
        assert row.issued_with == f"join token {issued.info.id}"


def test_an_expired_or_unknown_join_token_is_refused_and_changes_nothing(master: Master) -> None:
    issued = creds.create_join_token(master.ctx, master.admin, "", 60)
    with master.ctx.unit_of_work() as w:
        w.session.get_one(models.AgentJoinToken, issued.info.id).expires_at = utcnow() - timedelta(seconds=1)
    with pytest.raises(Unauthenticated, match=f"join token {issued.info.id} expired at"):
        creds.enrol(master.ctx, "a1", join_token=issued.token)
    with pytest.raises(Unauthenticated, match="not one this master made"):
        creds.enrol(master.ctx, "a1", join_token="not-a-token")
    with master.db.read() as s:
        assert s.get(models.AgentCredential, "a1") is None
        assert s.get_one(models.AgentJoinToken, issued.info.id).used_at is None


def test_a_join_token_bound_to_an_id_enrols_that_id_alone(master: Master) -> None:
    issued = creds.create_join_token(master.ctx, master.admin, "a1", 0)
    with pytest.raises(PermissionDenied, match=f"join token {issued.info.id} is for agent a1, not a2"):
        creds.enrol(master.ctx, "a2", join_token=issued.token)
    assert _agent_of(master, creds.enrol(master.ctx, "a1", join_token=issued.token).credential) == "a1"


def test_who_may_make_join_tokens_and_bad_input(master: Master) -> None:
    user = master.add_user("someone")
    with pytest.raises(PermissionDenied, match="only an admin may make agent join tokens"):
        creds.create_join_token(master.ctx, user, "", 0)
    # The cluster itself (the local cluster, the provisioner) may.
    assert creds.create_join_token(master.ctx, CLUSTER, "agent-1", 0).info.agent_id == "agent-1"
    for user_only in (
        lambda p: creds.rotate_enrolment_secret(master.ctx, p),
        lambda p: creds.list_join_tokens(master.ctx, p, False),
        lambda p: creds.list_credentials(master.ctx, p),
        lambda p: agent_revocation.revoke(master.ctx, p, "agent-1"),
    ):
        for principal in (user, CLUSTER):
            with pytest.raises(PermissionDenied, match="only an admin may"):
                user_only(principal)
    with pytest.raises(InvalidArgument, match="agent_id: 'a b' is not an agent id"):
        creds.create_join_token(master.ctx, master.admin, "a b", 0)
    with pytest.raises(InvalidArgument, match="expires_in_seconds: 2592001 is not between"):
        creds.create_join_token(master.ctx, master.admin, "", creds.JOIN_TOKEN_MAX_S + 1)
    with pytest.raises(InvalidArgument, match="means: give either join_token or enrolment_secret"):
        creds.enrol(master.ctx, "a1")
    with pytest.raises(InvalidArgument, match="agent_id"):
        creds.enrol(master.ctx, "../x", join_token="t")
    with pytest.raises(InvalidArgument, match="join_token: over 512 characters"):
        creds.enrol(master.ctx, "a1", join_token="t" * 513)


def test_the_enrolment_secret_enrols_until_it_is_rotated(master: Master) -> None:
    with pytest.raises(Unauthenticated, match="enrolment secret: not this cluster's"):
        creds.enrol(master.ctx, "a1", enrolment_secret="anything")
    first = creds.rotate_enrolment_secret(master.ctx, master.admin)
    a1 = creds.enrol(master.ctx, "a1", enrolment_secret=first.secret)
    second = creds.rotate_enrolment_secret(master.ctx, master.admin)
    with pytest.raises(Unauthenticated, match=r"this one was rotated out at .* and enrols no agent"):
        creds.enrol(master.ctx, "a2", enrolment_secret=first.secret)
    a2 = creds.enrol(master.ctx, "a2", enrolment_secret=second.secret)
    # Credentials issued under the old secret stay good: rotating stops new enrolments only.
    assert (_agent_of(master, a1.credential), _agent_of(master, a2.credential)) == ("a1", "a2")


def test_a_configured_secret_seeds_a_cluster_that_has_none(master: Master) -> None:
    assert creds.seed_enrolment_secret(master.ctx, "configured-secret")
    assert creds.enrol(master.ctx, "a1", enrolment_secret="configured-secret").agent_id == "a1"
    rotated = creds.rotate_enrolment_secret(master.ctx, master.admin)
    # A restarted master with the same configuration does not bring the old secret back.
    assert not creds.seed_enrolment_secret(master.ctx, "configured-secret")
    with pytest.raises(Unauthenticated, match="rotated out"):
        creds.enrol(master.ctx, "a2", enrolment_secret="configured-secret")
    assert creds.enrol(master.ctx, "a2", enrolment_secret=rotated.secret).agent_id == "a2"


def test_a_credential_speaks_only_as_its_own_agent(master: Master) -> None:
    secret = creds.rotate_enrolment_secret(master.ctx, master.admin).secret
    creds.enrol(master.ctx, "a1", enrolment_secret=secret)
    _speaks_as(master, _as_agent("a1"), "a1")
    with pytest.raises(PermissionDenied, match="issued to agent a1; it may not speak as a2"):
        _speaks_as(master, _as_agent("a1"), "a2")
    # The cluster token (compatibility mode) speaks for ids without a credential, not for a1.
    _speaks_as(master, ON_CLUSTER_TOKEN, "a2")
    with pytest.raises(Unauthenticated, match="agent a1 has a credential of its own"):
        _speaks_as(master, ON_CLUSTER_TOKEN, "a1")


def test_an_enrolled_id_is_enrolled_anew_only_by_a_token_made_for_it(master: Master) -> None:
    secret = creds.rotate_enrolment_secret(master.ctx, master.admin).secret
    old = creds.enrol(master.ctx, "a1", enrolment_secret=secret)
    # One machine holding the secret (or any token) cannot take another's id.
    with pytest.raises(FailedPrecondition, match=r"agent a1 is enrolled already .* the enrolment secret"):
        creds.enrol(master.ctx, "a1", enrolment_secret=secret)
    unbound = creds.create_join_token(master.ctx, master.admin, "", 0)
    with pytest.raises(FailedPrecondition, match="--agent-id a1"):
        creds.enrol(master.ctx, "a1", join_token=unbound.token)
    assert _agent_of(master, old.credential) == "a1"  # nothing changed
    bound = creds.create_join_token(master.ctx, master.admin, "a1", 0)
    new = creds.enrol(master.ctx, "a1", join_token=bound.token)
    assert new.replaced
    assert _agent_of(master, new.credential) == "a1"
    with pytest.raises(Unauthenticated, match="not one this master issued"):
        _agent_of(master, old.credential)


def _two_agents_and_a_running_trial(master: Master) -> tuple[int, int, str]:
    master.add_agent("a1")
    experiment_id = master.create()
    (trial,) = master.trials(experiment_id)
    allocation_id = master.live(trial.id).id
    master.run_containers(allocation_id)
    (container,) = master.containers(allocation_id)
    assert container.agent_id == "a1"
    master.add_agent("a2")
    return experiment_id, trial.id, allocation_id


def test_revoking_an_agent_refuses_it_and_restarts_its_trial_elsewhere(master: Master) -> None:
    secret = creds.rotate_enrolment_secret(master.ctx, master.admin).secret
    credential = creds.enrol(master.ctx, "a1", enrolment_secret=secret).credential
    experiment_id, trial_id, allocation_id = _two_agents_and_a_running_trial(master)

    revocation = agent_revocation.revoke(master.ctx, master.admin, "a1")
    assert revocation.lost_allocation_ids == [allocation_id]
    assert (revocation.credential.revoked_by, revocation.credential.revoked_at is not None) == ("admin", True)
    master.hub.connected.discard("a1")  # the real hub closed its stream (AgentHub.refuse)
    master.settle()
    assert master.allocations(trial_id)[0].state == A.TERMINATED
    restarted = master.live(trial_id)
    assert restarted.id != allocation_id
    assert [c.agent_id for c in master.containers(restarted.id)] == ["a2"]
    (trial,) = master.trials(experiment_id)
    assert trial.restarts == 0  # the agent's loss is not the code's failure

    # Refused from now on: its credential, the cluster token speaking for it, and re-enrolment.
    with pytest.raises(PermissionDenied, match=r"agent a1 was revoked at .* by admin"):
        _agent_of(master, credential)
    with pytest.raises(PermissionDenied, match="agent a1 was revoked"):
        _speaks_as(master, ON_CLUSTER_TOKEN, "a1")
    with pytest.raises(PermissionDenied, match=r"agent a1 was revoked .* only a join token made for it"):
        creds.enrol(master.ctx, "a1", enrolment_secret=secret)
    unbound = creds.create_join_token(master.ctx, master.admin, "", 0)
    with pytest.raises(PermissionDenied, match="agent a1 was revoked"):
        creds.enrol(master.ctx, "a1", join_token=unbound.token)

    # Again: nothing more is lost, and the first revocation's time stays.
    again = agent_revocation.revoke(master.ctx, master.admin, "a1")
    assert again.lost_allocation_ids == [] and again.credential.revoked_at == revocation.credential.revoked_at

    # An admin's join token made for it admits it again, with a new credential.
    readmitted = creds.enrol(
        master.ctx, "a1", join_token=creds.create_join_token(master.ctx, master.admin, "a1", 0).token
    )
    assert _agent_of(master, readmitted.credential) == "a1"
    with pytest.raises(Unauthenticated, match="not one this master issued"):
        _agent_of(master, credential)  # the revoked credential stays refused: it was replaced
    (listed,) = [c for c in creds.list_credentials(master.ctx, master.admin) if c.agent_id == "a1"]
    assert listed.revoked_at is None and listed.issued_with.startswith("join token")


def test_an_agent_on_the_cluster_token_can_be_revoked_and_unknown_ids_are_not_found(master: Master) -> None:
    master.add_agent("old-agent")  # joined with the cluster token: no credential
    agent_revocation.revoke(master.ctx, master.admin, "old-agent")
    with pytest.raises(PermissionDenied, match="agent old-agent was revoked"):
        _speaks_as(master, ON_CLUSTER_TOKEN, "old-agent")
    with pytest.raises(NotFound, match="agent nobody not found"):
        agent_revocation.revoke(master.ctx, master.admin, "nobody")
    with master.db.read() as s:
        assert s.get(models.AgentCredential, "nobody") is None


def test_the_hub_ends_a_refused_agents_stream_at_once() -> None:
    hub = AgentHub()
    link = hub.attach("a1")
    hub.send("a1", apb.MasterMessage(log_ack=apb.LogAck(acked_seq={"c": 1})))
    hub.refuse("a1", "agent a1 was revoked")
    assert link.closed.is_set() and link.refusal == "agent a1 was revoked"
    assert "a1" not in hub.connected_ids()
    hub.refuse("a2", "no stream")  # not connected: nothing to close, nothing kept for it
    assert hub.take_backlog("a1") == []

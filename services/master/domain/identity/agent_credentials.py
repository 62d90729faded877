"""Agents' own credentials: how an agent joins, and how the master knows it afterwards.

An agent enrols once, with either
- a **join token**: one-time, made by an admin (or by the cluster itself: the local cluster makes
  one for each agent it starts, the provisioner one for each instance it launches), good until it
  expires (24 hours unless asked otherwise, 30 days at most), optionally bound to one agent id; or
- the cluster's **enrolment secret**: long-lived, shown once when an admin rotates it; rotating
  retires the one before, which from then on enrols no agent (credentials it issued stay good).
It receives a **credential of its own**, bound to its agent id, which it presents on every call
(metadata `x-cairn-agent-credential`); an agent presenting credential X speaks only as the id X was
issued to. Every secret here is random (256 bits) and stored only as its sha256, looked up through
a unique index: guessing one is hopeless and a leaked database leaks none.

Who may enrol which id:
- an id that holds no credential: any good join token (unbound, or bound to it), or the secret;
- an id that holds one (a machine that lost its state, a re-imaged one): only a join token bound to
  it, which replaces the credential (the old one stops working, its stream is closed). The
  enrolment secret does not, so one machine holding the secret cannot take over another's id;
- a revoked id: only a join token bound to it (an admin's deliberate re-admission).

Revocation is marked here (`mark_revoked`); what it does to the agent's stream and work is
scheduling/agent_revocation.py. An id revoked before it ever enrolled (an agent on the cluster
token, in compatibility mode) gets a row without a credential, which is what shuts it out.
Who may manage any of this: access.py.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, or_, select
from sqlalchemy.orm import Session

from services.common.principal import Principal
from services.master.domain.identity import access
from services.master.domain.identity.permissions import Permission
from services.master.domain.identity.secret_text import new_secret_text
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.errors import (
    FailedPrecondition,
    InvalidArgument,
    PermissionDenied,
    Unauthenticated,
)
from services.master.store import models

# A join token's life unless its maker says otherwise, and the longest it may have.
JOIN_TOKEN_DEFAULT_S = 24 * 3600
JOIN_TOKEN_MAX_S = 30 * 24 * 3600
# Used and expired join tokens are listed (show_inactive) for this long, then forgotten.
INACTIVE_TOKENS_KEPT = timedelta(days=30)
# The agent's own rule for --agent-id (services/agent/settings.py), and the column's width.
_AGENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
# A secret is ~43 characters; one far longer is not one of ours (and is not hashed).
MAX_SECRET_CHARS = 512


def new_secret() -> str:
    return new_secret_text()


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def check_agent_id(agent_id: str, field: str) -> None:
    if not _AGENT_ID.match(agent_id):
        raise InvalidArgument(
            f"{field}: {agent_id[:64]!r} is not an agent id (letters, digits, '.', '_' and '-', "
            "at most 253, starting with a letter or digit)"
        )


def _check_secret_text(secret: str, field: str) -> None:
    if not secret:
        raise InvalidArgument(f"{field}: required")
    if len(secret) > MAX_SECRET_CHARS:
        raise InvalidArgument(f"{field}: over {MAX_SECRET_CHARS} characters; not a secret this master made")


def _when(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S UTC")


# ---- join tokens --------------------------------------------------------------------------------


@dataclass(frozen=True)
class JoinTokenInfo:
    id: int
    agent_id: str | None
    created_by: str
    created_at: datetime
    expires_at: datetime
    used_at: datetime | None
    used_by_agent: str | None

    @classmethod
    def of(cls, row: models.AgentJoinToken) -> JoinTokenInfo:
        return cls(
            id=row.id,
            agent_id=row.agent_id,
            created_by=row.created_by,
            created_at=row.created_at,
            expires_at=row.expires_at,
            used_at=row.used_at,
            used_by_agent=row.used_by_agent,
        )


@dataclass(frozen=True)
class IssuedJoinToken:
    info: JoinTokenInfo
    # Shown once; only its hash is stored.
    token: str


def mint_join_token(
    w: Work, *, agent_id: str | None, expires_in_s: float, created_by: str
) -> IssuedJoinToken:
    """A new join token in `w` (no access check: the caller decided; the provisioner mints one
    for each instance it launches in its own unit of work)."""
    now = utcnow()
    token = new_secret()
    row = models.AgentJoinToken(
        token_hash=secret_hash(token),
        agent_id=agent_id,
        created_by=created_by[:255],
        created_at=now,
        expires_at=now + timedelta(seconds=expires_in_s),
    )
    w.session.add(row)
    _forget_old_tokens(w, now)
    w.session.flush()
    return IssuedJoinToken(JoinTokenInfo.of(row), token)


def _forget_old_tokens(w: Work, now: datetime) -> None:
    """Tokens used or expired more than INACTIVE_TOKENS_KEPT ago: the table stays small."""
    cutoff = now - INACTIVE_TOKENS_KEPT
    w.session.execute(
        delete(models.AgentJoinToken).where(
            or_(models.AgentJoinToken.used_at < cutoff, models.AgentJoinToken.expires_at < cutoff)
        )
    )


def create_join_token(
    ctx: MasterContext, principal: Principal, agent_id: str, expires_in_s: int
) -> IssuedJoinToken:
    """A join token for `agent_id` ("" = any id that holds no credential), good for
    `expires_in_s` seconds (0 = JOIN_TOKEN_DEFAULT_S)."""
    access.check_may_enrol_agents(principal, "make agent join tokens")
    if agent_id:
        check_agent_id(agent_id, "agent_id")
    if expires_in_s < 0 or expires_in_s > JOIN_TOKEN_MAX_S:
        raise InvalidArgument(
            f"expires_in_seconds: {expires_in_s} is not between 1 and {JOIN_TOKEN_MAX_S} (30 days); "
            "0 = 24 hours"
        )
    with ctx.unit_of_work() as w:
        return mint_join_token(
            w,
            agent_id=agent_id or None,
            expires_in_s=expires_in_s or JOIN_TOKEN_DEFAULT_S,
            created_by=principal.username or "the cluster",
        )


def list_join_tokens(ctx: MasterContext, principal: Principal, show_inactive: bool) -> list[JoinTokenInfo]:
    access.check_cluster_by_person(principal, Permission.UPDATE_AGENTS, "list agent join tokens")
    now = utcnow()
    with ctx.db.read() as s:
        query = select(models.AgentJoinToken).order_by(models.AgentJoinToken.id)
        if not show_inactive:
            query = query.where(
                models.AgentJoinToken.used_at.is_(None), models.AgentJoinToken.expires_at > now
            )
        return [JoinTokenInfo.of(row) for row in s.scalars(query)]


# ---- the enrolment secret -----------------------------------------------------------------------


@dataclass(frozen=True)
class RotatedSecret:
    secret: str
    created_at: datetime


def _replace_secret(w: Work, secret: str, created_by: str) -> datetime:
    now = utcnow()
    for current in w.session.scalars(
        select(models.AgentEnrolmentSecret).where(models.AgentEnrolmentSecret.retired_at.is_(None))
    ):
        current.retired_at = now
    w.session.add(
        models.AgentEnrolmentSecret(
            secret_hash=secret_hash(secret), created_by=created_by[:255], created_at=now
        )
    )
    return now


def rotate_enrolment_secret(ctx: MasterContext, principal: Principal) -> RotatedSecret:
    """A new enrolment secret; the one before enrols no agent from now on."""
    access.check_cluster_by_person(principal, Permission.UPDATE_AGENTS, "rotate the agent enrolment secret")
    secret = new_secret()
    with ctx.unit_of_work() as w:
        created_at = _replace_secret(w, secret, principal.username)
    return RotatedSecret(secret, created_at)


def seed_enrolment_secret(ctx: MasterContext, secret: str) -> bool:
    """The master's configured secret (--agent-enrolment-secret-file) becomes the cluster's, on a
    cluster that never had one; once one exists, only a rotation changes it. Whether it was seeded."""
    _check_secret_text(secret, "--agent-enrolment-secret-file")
    with ctx.unit_of_work() as w:
        if w.session.scalar(select(models.AgentEnrolmentSecret.id).limit(1)) is not None:
            return False
        _replace_secret(w, secret, "the master's configuration")
        return True


# ---- enrolment ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Enrolment:
    agent_id: str
    credential: str
    # The id held a credential before (now replaced): a stream on the old one must be closed.
    replaced: bool


def enrol(
    ctx: MasterContext, agent_id: str, *, join_token: str = "", enrolment_secret: str = ""
) -> Enrolment:
    """Issue `agent_id` a credential of its own for a good join token or the current enrolment
    secret (the rules are in the module's docstring). Nothing changes when it is refused."""
    check_agent_id(agent_id, "agent_id")
    if bool(join_token) == bool(enrolment_secret):
        raise InvalidArgument("means: give either join_token or enrolment_secret")
    if join_token:
        _check_secret_text(join_token, "join_token")
    else:
        _check_secret_text(enrolment_secret, "enrolment_secret")
    now = utcnow()
    with ctx.unit_of_work() as w:
        existing = w.session.get(models.AgentCredential, agent_id)
        if join_token:
            token = _usable_join_token(w, join_token, agent_id, now)
            bound_to_it = token.agent_id == agent_id
            issued_with = f"join token {token.id}"
        else:
            issued_with = f"enrolment secret {_current_secret_id(w, enrolment_secret)}"
            bound_to_it = False
        if existing is not None and not bound_to_it:
            _refuse_enrolled(existing, agent_id, "a join token" if join_token else "the enrolment secret")
        if join_token:
            token.used_at, token.used_by_agent = now, agent_id
        credential = new_secret()
        replaced = existing is not None and existing.secret_hash is not None and existing.revoked_at is None
        if existing is None:
            existing = models.AgentCredential(agent_id=agent_id)
            w.session.add(existing)
        existing.secret_hash = secret_hash(credential)
        existing.issued_at = now
        existing.issued_with = issued_with
        existing.revoked_at = None
        existing.revoked_by = ""
        if replaced:
            # Whoever held the old credential is speaking for this id no longer.
            w.later(
                lambda: ctx.hub.refuse(
                    agent_id, f"agent {agent_id} enrolled anew: this credential was replaced"
                )
            )
    return Enrolment(agent_id, credential, replaced)


def _usable_join_token(w: Work, token: str, agent_id: str, now: datetime) -> models.AgentJoinToken:
    row = w.session.scalar(
        select(models.AgentJoinToken).where(models.AgentJoinToken.token_hash == secret_hash(token))
    )
    if row is None:
        raise Unauthenticated(
            "join token: not one this master made (mistyped, from another cluster, or forgotten "
            "30 days after it was used or expired); ask an admin for a new one "
            "(`cairn agent join-token create`)"
        )
    if row.used_at is not None:
        raise Unauthenticated(
            f"join token {row.id} was used already, by agent {row.used_by_agent} at {_when(row.used_at)}: "
            "a join token admits one agent; ask an admin for a new one"
        )
    if row.expires_at <= now:
        raise Unauthenticated(
            f"join token {row.id} expired at {_when(row.expires_at)}; ask an admin for a new one"
        )
    if row.agent_id is not None and row.agent_id != agent_id:
        raise PermissionDenied(f"join token {row.id} is for agent {row.agent_id}, not {agent_id}")
    return row


def _current_secret_id(w: Work, secret: str) -> int:
    row = w.session.scalar(
        select(models.AgentEnrolmentSecret).where(
            models.AgentEnrolmentSecret.secret_hash == secret_hash(secret)
        )
    )
    if row is None:
        raise Unauthenticated(
            "enrolment secret: not this cluster's (an admin shows the current one with "
            "`cairn agent enrolment-secret rotate`)"
        )
    if row.retired_at is not None:
        raise Unauthenticated(
            f"enrolment secret: this one was rotated out at {_when(row.retired_at)} and enrols no agent "
            "any more; ask an admin for the current one"
        )
    return row.id


def _refuse_enrolled(existing: models.AgentCredential, agent_id: str, means: str) -> None:
    again = f"a join token made for it (`cairn agent join-token create --agent-id {agent_id}`)"
    if existing.revoked_at is not None:
        raise PermissionDenied(
            f"agent {agent_id} was revoked at {_when(existing.revoked_at)} by "
            f"{existing.revoked_by or 'an admin'}: only {again} admits it again"
        )
    raise FailedPrecondition(
        f"agent {agent_id} is enrolled already (since {_when(existing.issued_at or utcnow())}), and {means} "
        f"does not enrol an id that holds a credential; an agent that lost its credential enrols anew "
        f"with {again}"
    )


# ---- knowing an agent by its credential ---------------------------------------------------------


def _revoked_message(row: models.AgentCredential) -> str:
    assert row.revoked_at is not None
    return (
        f"agent {row.agent_id} was revoked at {_when(row.revoked_at)} by {row.revoked_by or 'an admin'}: "
        "this master refuses it from now on (an admin admits it again with a join token made for it)"
    )


def agent_of_credential(s: Session, credential: str) -> str:
    """The agent id `credential` was issued to; Unauthenticated when no agent holds it,
    PermissionDenied when its agent was revoked."""
    if len(credential) > MAX_SECRET_CHARS:
        raise Unauthenticated("agent credential: not one this master issued")
    row = s.scalar(
        select(models.AgentCredential).where(models.AgentCredential.secret_hash == secret_hash(credential))
    )
    if row is None:
        raise Unauthenticated(
            "agent credential: not one this master issued (replaced by a newer enrolment of the same id, "
            "or from another cluster or database); enrol the agent again with a join token or the "
            "enrolment secret"
        )
    if row.revoked_at is not None:
        raise PermissionDenied(_revoked_message(row))
    return row.agent_id


def check_may_speak_as(s: Session, principal: Principal, agent_id: str) -> None:
    """Whether the agent `principal` may speak as `agent_id` (its hello, its requests): one that
    presented a credential only as the id it was issued to (and only while it is not revoked: a
    stream opened just before a revocation is caught here); one on the cluster token (compatibility
    mode) only as an id that holds no credential, enrolled or revoked."""
    row = s.get(models.AgentCredential, agent_id)
    if principal.agent_id is not None:
        if principal.agent_id != agent_id:
            raise PermissionDenied(
                f"this credential was issued to agent {principal.agent_id}; it may not speak as {agent_id}"
            )
        if row is not None and row.revoked_at is not None:
            raise PermissionDenied(_revoked_message(row))
        return
    if row is None:
        return
    if row.revoked_at is not None:
        raise PermissionDenied(_revoked_message(row))
    raise Unauthenticated(
        f"agent {agent_id} has a credential of its own (enrolled {_when(row.issued_at or utcnow())}): "
        "it must present that, not the cluster token"
    )


# ---- revocation and listing ---------------------------------------------------------------------


@dataclass(frozen=True)
class CredentialInfo:
    agent_id: str
    issued_at: datetime | None
    issued_with: str
    revoked_at: datetime | None
    revoked_by: str

    @classmethod
    def of(cls, row: models.AgentCredential) -> CredentialInfo:
        return cls(row.agent_id, row.issued_at, row.issued_with, row.revoked_at, row.revoked_by)


def mark_revoked(w: Work, agent_id: str, by: str) -> tuple[CredentialInfo, bool]:
    """`agent_id` is refused from now on (its credential, or the cluster token speaking for it);
    (its credential's row, whether it was revoked only now)."""
    row = w.session.get(models.AgentCredential, agent_id)
    if row is None:
        row = models.AgentCredential(agent_id=agent_id, issued_with="")
        w.session.add(row)
    newly = row.revoked_at is None
    if newly:
        row.revoked_at = utcnow()
        row.revoked_by = by[:255]
    w.session.flush()
    return CredentialInfo.of(row), newly


def holds_credential_row(w: Work, agent_id: str) -> bool:
    return w.session.get(models.AgentCredential, agent_id) is not None


def list_credentials(ctx: MasterContext, principal: Principal) -> list[CredentialInfo]:
    access.check_cluster_by_person(principal, Permission.VIEW_SENSITIVE_AGENT_INFO, "list agent credentials")
    with ctx.db.read() as s:
        rows = s.scalars(select(models.AgentCredential).order_by(models.AgentCredential.agent_id))
        return [CredentialInfo.of(row) for row in rows]

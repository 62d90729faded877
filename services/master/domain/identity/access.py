"""Who may change what: every decision of the form "may this caller change (or delete, or open)
this object" is made here, so the rule is written once and a new kind of object cannot forget part
of it.

The rule today (Determined's open-source one): the object's owner, an admin, or the cluster
itself (an internal caller holding the cluster token, such as the master's own loops or the CLI's
cluster commands) may change a thing; anyone logged in may read it. Trial code, holding only an
allocation token, is checked apart (allocation_access.py): it opens its own trial and nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable

from services.common.principal import Principal
from services.master.domain.kernel.errors import PermissionDenied


def privileged(principal: Principal) -> bool:
    """An admin, or the cluster itself: may change anything."""
    return principal.admin or principal.internal


def may_change(principal: Principal, owners: Iterable[int | None]) -> bool:
    """Whether `principal` may change an object owned by any of `owners` (None: nobody)."""
    if privileged(principal):
        return True
    return principal.user_id is not None and principal.user_id in {o for o in owners if o is not None}


def check_may_change(
    principal: Principal,
    owners: Iterable[int | None],
    what: str,
    *,
    verb: str = "change",
    who: str = "its owner",
) -> None:
    """PermissionDenied naming `what` (e.g. "experiment 7") unless `principal` may change it."""
    if not may_change(principal, owners):
        raise PermissionDenied(f"{what} belongs to another user; only {who} or an admin may {verb} it")


def check_admin(principal: Principal, what: str) -> None:
    """PermissionDenied unless `principal` is an admin: for what only a person with the admin role
    may do (read the master's config, manage users and agents), not the cluster's own calls."""
    if not principal.admin:
        raise PermissionDenied(f"only an admin may {what}")


def may_read_workspace_contents(principal: Principal, workspace_id: int) -> bool:
    """Whether `principal` may read the projects, models and model versions of a workspace, as the
    read APIs show them (and Determined's streaming updates stream them): anyone logged in, or the
    cluster itself. Trial code's allocation token opens its own trial alone."""
    del workspace_id  # every workspace is readable to every user under the rule above
    return principal.user_id is not None or privileged(principal)


def check_may_enrol_agents(principal: Principal, what: str) -> None:
    """PermissionDenied unless `principal` may let agents join (make join tokens): an admin, or the
    cluster itself (the local cluster makes one for each agent it starts; the provisioner for each
    instance it launches). Revoking agents, rotating the enrolment secret and listing credentials
    are an admin's alone (check_admin)."""
    if not privileged(principal):
        raise PermissionDenied(f"only an admin may {what}")


def may_manage_tokens_of(principal: Principal, owner_id: int) -> bool:
    """Whether `principal` may create, list, change and revoke `owner_id`'s access tokens: the
    owner, or an admin. Not the cluster itself: a token acts as a person, and only a person (or an
    admin for them) mints or sees one."""
    return principal.admin or (principal.user_id is not None and principal.user_id == owner_id)


def check_may_manage_tokens(principal: Principal, owner_id: int, what: str, verb: str) -> None:
    """PermissionDenied naming `what` (e.g. "access token 7") unless `principal` may manage the
    access tokens of `owner_id` (may_manage_tokens_of)."""
    if not may_manage_tokens_of(principal, owner_id):
        raise PermissionDenied(f"{what} belongs to another user; only its owner or an admin may {verb} it")


def sees_every_token(principal: Principal) -> bool:
    """Whether a listing of access tokens shows everyone's (an admin) or only the caller's own."""
    return principal.admin

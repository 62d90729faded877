"""Who may do what: every decision of the form "may this caller do X on this workspace (or the
cluster), to this object" is made here, so the rule is written once and a new kind of object
cannot forget part of it.

The rule (Determined's RBAC): a user may do what the roles they hold grant (roles.py), held
cluster-wide or on the workspace the object lives in, directly or through a group (grants.py). An
admin (the admin flag) is ClusterAdmin; the cluster itself (an internal caller holding the cluster
token: the master's own loops, the CLI's cluster commands) may do anything. Changing or deleting
an object someone else owns also takes CHANGE_OTHERS on its workspace (permissions.py: Editors
change what they own). Trial code, holding only an allocation token, is checked apart
(allocation_access.py): it opens its own trial and nothing else.

Reads are decided here too: `readable_workspaces` is the set of workspaces whose objects a caller
sees, which the read model (domain/reads/) puts in its SQL, so a listing, a count or a search shows
nothing of a workspace the caller holds no role on; a single object there reads as not found.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from services.common.principal import Principal
from services.master.domain.identity import allocation_access, grants, rpc_decisions, scopes
from services.master.domain.identity.permissions import NAMES, Permission
from services.master.domain.identity.roles import CLUSTER_ADMIN, ROLES
from services.master.domain.identity.rpc_decisions import Kind
from services.master.domain.kernel.errors import NotFound, PermissionDenied
from services.master.store import models


def privileged(principal: Principal) -> bool:
    """An admin, or the cluster itself: may do anything."""
    return principal.admin or principal.internal


def resolved(principal: Principal, s: Session) -> Principal:
    """The principal with its grants attached (computed now if it came without): for a caller
    that decides many times in one call (a listing)."""
    if principal.grants is not None or principal.user_id is None or principal.admin or principal.internal:
        return principal
    return dataclasses.replace(principal, grants=grants.of(principal, s))


def may(
    principal: Principal, permission: Permission, workspace_id: int | None, s: Session | None = None
) -> bool:
    """Whether `principal` holds `permission` on the workspace (None: cluster-wide)."""
    return grants.of(principal, s).has(permission, workspace_id)


def may_change(
    principal: Principal,
    permission: Permission,
    workspace_id: int | None,
    owners: Iterable[int | None],
    s: Session | None = None,
) -> bool:
    """Whether `principal` may do `permission` to an object of the workspace owned by any of
    `owners` (None: nobody): the permission there, and the object is theirs or they hold
    CHANGE_OTHERS there too."""
    held = grants.of(principal, s)
    if not held.has(permission, workspace_id):
        return False
    mine = principal.user_id is not None and principal.user_id in {o for o in owners if o is not None}
    return mine or held.has(Permission.CHANGE_OTHERS, workspace_id)


def check(
    principal: Principal,
    permission: Permission,
    workspace_id: int | None,
    what: str,
    s: Session | None = None,
) -> None:
    """PermissionDenied naming `what` ("create a project in workspace 3") unless `principal`
    holds `permission` on the workspace (None: cluster-wide)."""
    if not may(principal, permission, workspace_id, s):
        raise PermissionDenied(_refusal(permission, what, f"on {_on(workspace_id)}"))


def check_change(
    principal: Principal,
    permission: Permission,
    workspace_id: int | None,
    owners: Iterable[int | None],
    what: str,
    s: Session | None = None,
    *,
    verb: str = "change",
    others: Permission = Permission.CHANGE_OTHERS,
) -> None:
    """PermissionDenied naming `what` ("experiment 7") unless `principal` may `verb` it: holds
    `permission` on its workspace, and it is theirs or they hold `others` there too (CHANGE_OTHERS;
    the model registry's deletions take Determined's DELETE_OTHER_USER_* instead)."""
    owners = list(owners)
    held = grants.of(principal, s)
    if not held.has(permission, workspace_id):
        raise PermissionDenied(_refusal(permission, f"{verb} {what}", f"on {_on(workspace_id)}"))
    mine = principal.user_id is not None and principal.user_id in {o for o in owners if o is not None}
    if not (mine or held.has(others, workspace_id)):
        raise PermissionDenied(
            f"{what} belongs to another user; only its owner or an admin (ClusterAdmin, or "
            f"WorkspaceAdmin of {_on(workspace_id)}) may {verb} it"
        )


def check_object(
    s: Session,
    principal: Principal,
    permission: Permission,
    workspace_id: int,
    owners: Iterable[int | None],
    what: str,
    *,
    view: Permission,
    verb: str = "change",
    others: Permission = Permission.CHANGE_OTHERS,
) -> None:
    """An object the caller names: not found unless they may read it (`view` on its workspace),
    refused unless they may `verb` it (check_change)."""
    check_readable(principal, view, workspace_id, what, s)
    check_change(principal, permission, workspace_id, owners, what, s, verb=verb, others=others)


def check_experiment(
    s: Session, principal: Principal, exp: models.Experiment, permission: Permission, *, verb: str = "change"
) -> int:
    """May `principal` do `permission` to the experiment (its workspace's roles; its owner's rule)?
    Its workspace, for what follows."""
    workspace_id = scopes.of_experiment(s, exp)
    check_object(
        s,
        principal,
        permission,
        workspace_id,
        [exp.owner_id],
        f"experiment {exp.id}",
        view=Permission.VIEW_EXPERIMENT_METADATA,
        verb=verb,
    )
    return workspace_id


def check_task(
    s: Session, principal: Principal, task: models.Task, permission: Permission, *, verb: str = "change"
) -> None:
    """As check_experiment, for a task: a trial's by its experiment's rules, others' by NSC's."""
    workspace_id = scopes.of_task(s, task)
    view = Permission.VIEW_EXPERIMENT_METADATA if task.experiment_id is not None else Permission.VIEW_NSC
    check_object(
        s, principal, permission, workspace_id, [task.owner_id], f"task {task.id}", view=view, verb=verb
    )


def check_cluster(principal: Principal, permission: Permission, what: str, s: Session | None = None) -> None:
    """PermissionDenied unless `principal` holds `permission` cluster-wide."""
    if not grants.of(principal, s).has(permission, None):
        raise PermissionDenied(_refusal(permission, what, "cluster-wide"))


def check_cluster_by_person(
    principal: Principal, permission: Permission, what: str, s: Session | None = None
) -> None:
    """As check_cluster, for what a person answers for (revoking an agent, rotating the enrolment
    secret, reading the audit trail or the agents' credentials): the cluster itself, which may do
    anything else, may not."""
    if principal.internal or not grants.of(principal, s).has(permission, None):
        raise PermissionDenied(_refusal(permission, what, "cluster-wide"))


def check_holds_anywhere(
    principal: Principal, permission: Permission, what: str, s: Session | None = None
) -> None:
    """PermissionDenied unless `principal` holds `permission` cluster-wide or on some workspace:
    the gate a call passes before the object it names is looked up (rpc_decisions.py)."""
    if not grants.of(principal, s).has_anywhere(permission):
        raise PermissionDenied(_refusal(permission, what, "on a workspace or cluster-wide"))


def readable_workspaces(
    principal: Principal, permission: Permission, s: Session | None = None
) -> frozenset[int] | None:
    """The workspaces whose objects `principal` may read under `permission` (VIEW_*); None: every
    workspace. The read model filters by it in SQL."""
    return grants.of(principal, s).workspaces_with(permission)


def check_readable(
    principal: Principal,
    permission: Permission,
    workspace_id: int | None,
    what: str,
    s: Session | None = None,
) -> None:
    """NotFound naming `what` unless `principal` may read it: an object of a workspace one holds
    no role on is not there for them (Determined answers so too), rather than refused."""
    if not may(principal, permission, workspace_id, s):
        raise NotFound(f"{what} not found")


def check_may_enrol_agents(principal: Principal, what: str) -> None:
    """PermissionDenied unless `principal` may let agents join (make join tokens): UPDATE_AGENTS
    cluster-wide (ClusterAdmin, an admin), or the cluster itself (the local cluster makes one for
    each agent it starts; the provisioner for each instance it launches)."""
    check_cluster(principal, Permission.UPDATE_AGENTS, what)


def may_manage_tokens_of(principal: Principal, owner_id: int, s: Session | None = None) -> bool:
    """Whether `principal` may create, list, change and revoke `owner_id`'s access tokens: the
    owner, or a user holding ADMINISTRATE_TOKEN cluster-wide (ClusterAdmin, an admin). Not the
    cluster itself: a token acts as a person, and only a person (or an admin for them) mints or
    sees one."""
    if principal.user_id is None:
        return False
    return principal.user_id == owner_id or grants.of(principal, s).has(Permission.ADMINISTRATE_TOKEN, None)


def check_may_manage_tokens(
    principal: Principal, owner_id: int, what: str, verb: str, s: Session | None = None
) -> None:
    """PermissionDenied naming `what` (e.g. "access token 7") unless `principal` may manage the
    access tokens of `owner_id` (may_manage_tokens_of)."""
    if not may_manage_tokens_of(principal, owner_id, s):
        raise PermissionDenied(f"{what} belongs to another user; only its owner or an admin may {verb} it")


def sees_every_token(principal: Principal, s: Session | None = None) -> bool:
    """Whether a listing of access tokens shows everyone's (VIEW_OTHER_TOKEN cluster-wide: an
    admin) or only the caller's own."""
    return principal.user_id is not None and grants.of(principal, s).has(Permission.VIEW_OTHER_TOKEN, None)


def is_trial_code(principal: Principal) -> bool:
    """A caller holding only an allocation token (no user)."""
    return principal.user_id is None and principal.allocation_id is not None and not principal.internal


def _on(workspace_id: int | None) -> str:
    return f"workspace {workspace_id}" if workspace_id is not None else "the cluster"


def _refusal(permission: Permission, what: str, where: str) -> str:
    """Why a call was refused, naming the permission and the roles that hold it."""
    holders = [r.name for r in ROLES if permission in r.permissions]
    needs = f"it takes {NAMES[permission]!r} {where} ({', '.join(holders)})"
    if holders == [CLUSTER_ADMIN.name]:
        return f"only an admin may {what}: {needs}"
    return f"may not {what}: {needs}"


def check_call(principal: Principal, method: str, s: Session | None = None) -> None:
    """The gate every call of the public API passes once its caller is known, before its request
    is looked at (rpc_decisions.py): a call with no recorded decision is refused; trial code's are
    left to allocation_access.py; a user is refused a call only an allocation's code makes, and a
    call that takes a workspace permission they hold nowhere. The domain decides the rest on the
    object the call names (its workspace, its owner) through the functions above."""
    decision = rpc_decisions.DECISIONS.get(method)
    if decision is None:
        raise PermissionDenied(f"{method}: no access decision is recorded for this call (rpc_decisions.py)")
    if principal.internal or is_trial_code(principal):
        return
    if decision.kind is Kind.TRIAL_CODE and principal.allocation_id is None:
        raise PermissionDenied(
            f"{method}: only an allocation's own code (its allocation token) makes this call"
        )
    if decision.kind is Kind.WORKSPACE and decision.permission is not None:
        check_holds_anywhere(principal, decision.permission, f"call {method}", s)


_VIEWS = frozenset(
    {
        Permission.VIEW_EXPERIMENT_METADATA,
        Permission.VIEW_EXPERIMENT_ARTIFACTS,
        Permission.VIEW_NSC,
        Permission.VIEW_PROJECT,
        Permission.VIEW_WORKSPACE,
        Permission.VIEW_MODEL_REGISTRY,
        Permission.VIEW_TEMPLATES,
        Permission.VIEW_WEBHOOKS,
    }
)


# A trial's experiment, read by the trial's id: built once, as every call naming a trial reads it.
_EXPERIMENT_OF_TRIAL = (
    select(models.Experiment)
    .join(models.Trial, models.Trial.experiment_id == models.Experiment.id)
    .where(models.Trial.id == bindparam("trial_id"))
)


def check_trial(
    s: Session, principal: Principal, trial_id: int, permission: Permission, field: str = "trial_id"
) -> None:
    """A call naming a trial: trial code names its own trial only (allocation_access.py); a user
    needs `permission` on its experiment (a VIEW_* one: may read it; another: may change it, by
    the owner's rule). A trial that is not there is left to the caller to report."""
    if is_trial_code(principal):
        allocation_access.check_trial(s, principal, trial_id, field)
        return
    if principal.internal:
        return
    exp = s.scalar(_EXPERIMENT_OF_TRIAL, {"trial_id": trial_id})
    if exp is None:
        return
    if permission in _VIEWS:
        check_readable(principal, permission, scopes.of_experiment(s, exp), f"trial {trial_id}", s)
    else:
        check_experiment(s, principal, exp, permission)


def check_checkpoint(
    s: Session, principal: Principal, uuid: str, permission: Permission, field: str = "uuid"
) -> None:
    """As check_trial, for a checkpoint (its trial's experiment)."""
    if is_trial_code(principal):
        allocation_access.check_checkpoint(s, principal, uuid, field)
        return
    trial_id = s.scalar(select(models.Checkpoint.trial_id).where(models.Checkpoint.uuid == uuid))
    if trial_id is not None:
        check_trial(s, principal, trial_id, permission, field)


def check_task_readable(s: Session, principal: Principal, task: models.Task) -> None:
    """A call reading a task (its logs, its config): trial code its own task only; a user one of a
    workspace they may read (a trial's task by its experiment's, another by NSC's)."""
    if is_trial_code(principal):
        allocation_access.check_task(s, principal, task.id)
        return
    view = Permission.VIEW_EXPERIMENT_METADATA if task.experiment_id is not None else Permission.VIEW_NSC
    check_readable(principal, view, scopes.of_task(s, task), f"task {task.id}", s)

"""Resource pools bound to workspaces (Determined's resource-pool workspace bindings).

A pool without bindings is shared by the whole cluster; a pool with any binding takes work only from
the workspaces bound to it. Every place that puts new work in a pool asks `check_available` (an
experiment's creation, continuation and pool edit; a task's launch; a workspace's default pools),
so work from another workspace is refused naming the pool and the workspace. Work already placed
keeps running when its workspace is unbound, as on Determined. The cluster's default compute and
auxiliary pools cannot be bound: work that names no pool must always have somewhere to go.

Only an admin changes bindings; anyone may list them. Bindings live in the database, so they
outlive a restart, and go with their workspace (the foreign key cascades).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import bindparam, delete, select
from sqlalchemy.orm import Session

from services.common.principal import Principal
from services.master.domain.identity import access
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.errors import InvalidArgument, NotFound
from services.master.domain.kernel.paging import Page, page_of
from services.master.domain.kernel.states import WS
from services.master.store import models

# One call names at most this many workspaces (ids and names together): bounded before any lookup.
MAX_WORKSPACES_PER_CALL = 1000
_MAX_NAME_CHARS = 255


def _checked_pool(ctx: MasterContext, pool: str, *, bindable: bool) -> str:
    names = [p.name for p in ctx.settings.pools]
    if not pool:
        raise InvalidArgument("resourcePoolName: required (the pool to bind)")
    if pool not in names:
        # Determined's text, with the field and the pools there are.
        raise InvalidArgument(
            f"resourcePoolName: pool with name {pool!r} doesn't exist in config (pools: {', '.join(names)})"
        )
    if bindable and pool in default_pools(ctx):
        raise InvalidArgument(
            f"resourcePoolName: default resource pool {pool} cannot be bound to any workspace"
        )
    return pool


def default_pools(ctx: MasterContext) -> set[str]:
    """The cluster's default compute and auxiliary pools: never bound."""
    return {ctx.settings.default_pool, ctx.settings.default_aux_pool or ctx.settings.default_pool}


def _workspace_ids(s: Session, ids: Sequence[int], names: Sequence[str]) -> list[int]:
    """The workspaces `ids` and `names` name, each once, in the order given; NotFound naming the
    first that does not exist (or is being deleted)."""
    if len(ids) + len(names) > MAX_WORKSPACES_PER_CALL:
        raise InvalidArgument(
            f"workspaceIds, workspaceNames: at most {MAX_WORKSPACES_PER_CALL} workspaces in one call"
        )
    for name in names:
        if len(name) > _MAX_NAME_CHARS:
            raise InvalidArgument(f"workspaceNames: a workspace name is at most {_MAX_NAME_CHARS} characters")
    w = models.Workspace
    by_id = select(w.id, w.state).where(w.id.in_(set(ids)))
    found_by_id = dict(s.execute(by_id).all()) if ids else {}
    by_name = select(w.name, w.id, w.state).where(w.name.in_(set(names)))
    found_by_name = {name: (wid, state) for name, wid, state in s.execute(by_name)} if names else {}
    chosen: list[int] = []
    for wid in ids:
        if wid not in found_by_id or found_by_id[wid] == WS.DELETING:
            raise NotFound(f"workspaceIds: workspace {wid} not found")
        chosen.append(wid)
    for name in names:
        if name not in found_by_name or found_by_name[name][1] == WS.DELETING:
            raise NotFound(f"workspaceNames: workspace {name!r} not found")
        chosen.append(found_by_name[name][0])
    return list(dict.fromkeys(chosen))


def _bound(s: Session, pool: str) -> set[int]:
    b = models.PoolBinding
    return set(s.scalars(select(b.workspace_id).where(b.pool_name == pool)))


def _require_workspaces(ids: Sequence[int], names: Sequence[str]) -> None:
    if not ids and not names:
        raise InvalidArgument("workspaceIds, workspaceNames: name at least one workspace")


def bind(
    ctx: MasterContext, principal: Principal, pool: str, ids: Sequence[int], names: Sequence[str]
) -> None:
    """Bind `pool` to the workspaces named; a binding that exists already is refused naming it
    (Determined refuses it too), and nothing is bound."""
    access.check_cluster(principal, Permission.MODIFY_RP_WORKSPACE_BINDINGS, "change resource pool bindings")
    _checked_pool(ctx, pool, bindable=True)
    _require_workspaces(ids, names)
    with ctx.unit_of_work() as w:
        wanted = _workspace_ids(w.session, ids, names)
        already = sorted(set(wanted) & _bound(w.session, pool))
        if already:
            raise InvalidArgument(
                f"workspaceIds, workspaceNames: pool {pool!r} is already bound to workspace "
                f"{', '.join(str(i) for i in already)}"
            )
        _add(w, pool, wanted)


def replace(
    ctx: MasterContext, principal: Principal, pool: str, ids: Sequence[int], names: Sequence[str]
) -> None:
    """The pool bound to exactly the workspaces named (none: shared by the cluster again)."""
    access.check_cluster(principal, Permission.MODIFY_RP_WORKSPACE_BINDINGS, "change resource pool bindings")
    _checked_pool(ctx, pool, bindable=True)
    with ctx.unit_of_work() as w:
        wanted = _workspace_ids(w.session, ids, names)
        w.session.execute(delete(models.PoolBinding).where(models.PoolBinding.pool_name == pool))
        _add(w, pool, wanted)


def unbind(
    ctx: MasterContext, principal: Principal, pool: str, ids: Sequence[int], names: Sequence[str]
) -> None:
    """Unbind the workspaces named from `pool`; one that is not bound to it is refused naming it,
    and nothing is unbound. Their work already placed in the pool keeps running."""
    access.check_cluster(principal, Permission.MODIFY_RP_WORKSPACE_BINDINGS, "change resource pool bindings")
    _checked_pool(ctx, pool, bindable=False)
    _require_workspaces(ids, names)
    with ctx.unit_of_work() as w:
        wanted = _workspace_ids(w.session, ids, names)
        missing = [wid for wid in wanted if wid not in _bound(w.session, pool)]
        if missing:
            raise NotFound(
                f"workspaceIds, workspaceNames: workspace {missing[0]} is not bound to pool {pool!r}"
            )
        b = models.PoolBinding
        w.session.execute(delete(b).where(b.pool_name == pool, b.workspace_id.in_(wanted)))


def _add(w: Work, pool: str, workspace_ids: Sequence[int]) -> None:
    w.session.add_all(models.PoolBinding(workspace_id=wid, pool_name=pool) for wid in workspace_ids)


def workspaces_bound_to(ctx: MasterContext, pool: str, offset: int, limit: int) -> tuple[list[int], Page]:
    """The ids of the workspaces `pool` is bound to, in id order, one page of them."""
    _checked_pool(ctx, pool, bindable=False)
    with ctx.db.read() as s:
        ids = sorted(_bound(s, pool))
    page = page_of(len(ids), offset, limit)
    return ids[page.start : page.end], page


def bound_pools(s: Session) -> dict[str, set[int]]:
    """Every pool with bindings and the workspaces bound to it."""
    pools: dict[str, set[int]] = {}
    b = models.PoolBinding
    for pool, wid in s.execute(select(b.pool_name, b.workspace_id)):
        pools.setdefault(pool, set()).add(wid)
    return pools


def pools_available_to(
    ctx: MasterContext, workspace_id: int, offset: int, limit: int
) -> tuple[list[str], Page]:
    """The pools the workspace's work may use, in the config's order: those bound to it and those
    bound to none. One page of them."""
    with ctx.db.read() as s:
        workspace = s.get(models.Workspace, workspace_id)
        if workspace is None or workspace.state == WS.DELETING:
            raise NotFound(f"workspace {workspace_id} not found")
        bound = bound_pools(s)
    names = [p.name for p in ctx.settings.pools if p.name not in bound or workspace_id in bound[p.name]]
    page = page_of(len(names), offset, limit)
    return names[page.start : page.end], page


def unbound_pool_names(ctx: MasterContext) -> set[str]:
    """The pools shared by the whole cluster (bound to no workspace)."""
    with ctx.db.read() as s:
        bound = set(s.scalars(select(models.PoolBinding.pool_name).distinct()))
    return {p.name for p in ctx.settings.pools} - bound


# The workspaces a pool is bound to: built once, as every experiment's and task's creation reads it.
_BOUND_TO = select(models.PoolBinding.workspace_id).where(models.PoolBinding.pool_name == bindparam("pool"))


def check_available(s: Session, pool: str, workspace_id: int, field: str) -> None:
    """InvalidArgument naming `field`, the pool and the workspace unless the workspace's work may
    use `pool` (it is bound to the workspace, or to none)."""
    bound_to = set(s.scalars(_BOUND_TO, {"pool": pool}))
    if not bound_to or workspace_id in bound_to:
        return
    name = s.scalar(select(models.Workspace.name).where(models.Workspace.id == workspace_id))
    raise InvalidArgument(
        f"{field}: resource pool {pool!r} is bound to other workspaces, not to workspace {name!r} "
        f"(`det rp bindings list-workspaces {pool}` lists them)"
    )

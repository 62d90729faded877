"""`cairn workspace list | create | describe | quota | set-quota | clear-quota` (alias `w`):
workspaces, which hold projects, and their quotas per pool (and weights, in fair-share pools)."""

from __future__ import annotations

import click

from cairn.api.v1 import common_pb2
from cairn.api.v1 import workspace_pb2 as wpb
from cairn.cli.errors import CliError
from cairn.cli.groups import AliasedGroup
from cairn.cli.output import (
    bool_text,
    build_table,
    enum_label,
    key_value_table,
    message_to_dict,
    print_json,
    print_renderable,
)
from cairn.cli.paging import fetch_all
from cairn.cli.state import CliState, json_option, pass_state
from cairn.cli.user import user_by_name
from cairn.client.session import Session
from cairn.printable import printable

WORKSPACE_COLUMNS = ("ID", "Name", "Owner", "Projects", "Experiments", "Archived")
PROJECT_COLUMNS = ("ID", "Key", "Name", "Description", "Experiments", "Active", "Archived")


@click.group(cls=AliasedGroup, aliases={"ls": "list"})
def workspace() -> None:
    """Workspaces: named groups of projects."""


def workspace_by_name(session: Session, name: str) -> wpb.Workspace:
    """The workspace called `name` (case does not matter, as names are unique without it)."""
    found = session.api.GetWorkspaces(wpb.GetWorkspacesRequest(name=name)).workspaces
    if not found:
        raise CliError(f"no workspace named {name!r}")
    return found[0]


def workspace_projects(session: Session, workspace_id: int) -> list[wpb.Project]:
    return fetch_all(
        lambda offset, limit: session.api.GetWorkspaceProjects(
            wpb.GetWorkspaceProjectsRequest(id=workspace_id, offset=offset, limit=limit)
        ),
        "projects",
    )


def workspace_row(w: wpb.Workspace) -> list[str]:
    return [str(w.id), w.name, w.username, str(w.num_projects), str(w.num_experiments), bool_text(w.archived)]


def project_row(p: wpb.Project) -> list[str]:
    return [
        str(p.id),
        p.key,
        p.name,
        p.description,
        str(p.num_experiments),
        str(p.num_active_experiments),
        bool_text(p.archived),
    ]


def deletion_state(state: int, error_message: str) -> str:
    if state == wpb.WORKSPACE_STATE_UNSPECIFIED:
        return ""
    label = enum_label(wpb.WorkspaceState.Name(state), "WORKSPACE_STATE_")  # type: ignore[arg-type]
    return f"{label}: {error_message}" if error_message else label


@workspace.command(name="list")
@click.option("--all", "include_archived", is_flag=True, help="Include archived workspaces.")
@json_option
@pass_state
def list_workspaces(state: CliState, include_archived: bool, as_json: bool) -> None:
    """List workspaces."""
    api = state.session().api

    def page(offset: int, limit: int) -> wpb.GetWorkspacesResponse:
        request = wpb.GetWorkspacesRequest(order_by=common_pb2.ORDER_BY_ASC, offset=offset, limit=limit)
        if not include_archived:
            request.archived = False
        return api.GetWorkspaces(request)

    found = fetch_all(page, "workspaces")
    if as_json:
        print_json(wpb.GetWorkspacesResponse(workspaces=found))
        return
    print_renderable(build_table(WORKSPACE_COLUMNS, [workspace_row(w) for w in found]))


@workspace.command()
@click.argument("name")
@json_option
@pass_state
def create(state: CliState, name: str, as_json: bool) -> None:
    """Create a workspace called NAME."""
    created = state.session().api.PostWorkspace(wpb.PostWorkspaceRequest(name=name)).workspace
    if as_json:
        print_json(created)
        return
    click.echo(f"Created workspace {created.id} ({printable(created.name)})")


@workspace.command()
@click.argument("name")
@json_option
@pass_state
def describe(state: CliState, name: str, as_json: bool) -> None:
    """Show workspace NAME and its projects."""
    session = state.session()
    found = workspace_by_name(session, name)
    projects = workspace_projects(session, found.id)
    if as_json:
        print_json({"workspace": message_to_dict(found), "projects": [message_to_dict(p) for p in projects]})
        return
    pairs = [
        ("ID", str(found.id)),
        ("Name", found.name),
        ("Owner", found.username),
        ("Archived", bool_text(found.archived)),
        ("Built in", bool_text(found.immutable)),
        ("Default pool", found.default_compute_pool if found.HasField("default_compute_pool") else ""),
        ("Experiments", str(found.num_experiments)),
        ("Deletion", deletion_state(found.state, found.error_message)),
    ]
    print_renderable(key_value_table([(key, value) for key, value in pairs if value]))
    print_renderable(build_table(PROJECT_COLUMNS, [project_row(p) for p in projects], title="Projects"))


QUOTA_COLUMNS = ("Pool", "User", "Weight", "Guaranteed", "Max", "In use")


def _quota_row(share: wpb.PoolShare) -> list[str]:
    return [
        share.resource_pool,
        share.username if share.user_id else "(workspace)",
        f"{share.weight:g}" if share.fair_share else "-",  # a priority pool divides by no weight
        str(share.guaranteed_slots) if share.guaranteed_slots else "-",
        str(share.max_slots) if share.max_slots else "-",
        str(share.slots_in_use),
    ]


@workspace.command()
@click.argument("name")
@json_option
@pass_state
def quota(state: CliState, name: str, as_json: bool) -> None:
    """Show workspace NAME's quota in each pool (and weight, in a fair-share pool), its users' own,
    and the slots each holds now."""
    session = state.session()
    found = workspace_by_name(session, name)
    shares = session.api.GetWorkspacePoolShares(wpb.GetWorkspacePoolSharesRequest(workspace_id=found.id))
    if as_json:
        print_json(shares)
        return
    print_renderable(build_table(QUOTA_COLUMNS, [_quota_row(s) for s in shares.shares]))


def _user_id(session: Session, username: str | None) -> int:
    return user_by_name(session, username).id if username else 0


@workspace.command(name="set-quota")
@click.argument("name")
@click.option("--pool", "pool", required=True, help="A resource pool.")
@click.option("--user", "username", default=None, help="A user of the workspace (default: the workspace).")
@click.option(
    "--weight", type=float, default=1.0, show_default=True, help="Its weight among its siblings (fair share)."
)
@click.option("--guaranteed", type=int, default=0, show_default=True, help="Slots guaranteed while wanted.")
@click.option(
    "--max", "maximum", type=int, default=0, show_default=True, help="Slots never exceeded (0: none)."
)
@pass_state
def set_quota(
    state: CliState, name: str, pool: str, username: str | None, weight: float, guaranteed: int, maximum: int
) -> None:
    """Set workspace NAME's (or one of its users') quota in a pool, and its weight in a fair-share
    pool (admins). Guaranteed slots go first and are reclaimed for it; the maximum is never
    exceeded."""
    session = state.session()
    found = workspace_by_name(session, name)
    session.api.SetWorkspacePoolShare(
        wpb.SetWorkspacePoolShareRequest(
            workspace_id=found.id,
            resource_pool=pool,
            user_id=_user_id(session, username),
            weight=weight,
            guaranteed_slots=guaranteed,
            max_slots=maximum,
        )
    )
    who = f"user {username} in workspace {found.name}" if username else f"workspace {found.name}"
    click.echo(
        f"Set {printable(who)} in pool {printable(pool)}: "
        f"weight {weight:g}, guaranteed {guaranteed}, max {maximum}"
    )


@workspace.command(name="clear-quota")
@click.argument("name")
@click.option("--pool", "pool", required=True, help="A resource pool.")
@click.option("--user", "username", default=None, help="A user of the workspace (default: the workspace).")
@pass_state
def clear_quota(state: CliState, name: str, pool: str, username: str | None) -> None:
    """Back to weight 1 and no quota (admins)."""
    session = state.session()
    found = workspace_by_name(session, name)
    session.api.DeleteWorkspacePoolShare(
        wpb.DeleteWorkspacePoolShareRequest(
            workspace_id=found.id, resource_pool=pool, user_id=_user_id(session, username)
        )
    )
    click.echo("Cleared")

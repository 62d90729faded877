"""`cairn project list | create | describe` (alias `p`): projects, which hold experiments. A
project is named by its workspace's name and its own, as in Determined's CLI."""

from __future__ import annotations

import click

from cairn.api.v1 import experiment_pb2
from cairn.api.v1 import workspace_pb2 as wpb
from cairn.cli.errors import CliError
from cairn.cli.experiment_views import EXPERIMENT_COLUMNS, experiment_row
from cairn.cli.groups import AliasedGroup
from cairn.cli.output import (
    bool_text,
    build_table,
    key_value_table,
    message_to_dict,
    print_json,
    print_renderable,
    timestamp_text,
)
from cairn.cli.paging import fetch_all
from cairn.cli.state import CliState, json_option, pass_state
from cairn.cli.workspace import (
    PROJECT_COLUMNS,
    deletion_state,
    project_row,
    workspace_by_name,
    workspace_projects,
)
from cairn.client.session import Session
from cairn.printable import printable


@click.group(cls=AliasedGroup, aliases={"ls": "list"})
def project() -> None:
    """Projects: named groups of experiments in a workspace."""


def project_by_name(session: Session, workspace_name: str, project_name: str) -> wpb.Project:
    """Project `project_name` of workspace `workspace_name` (case does not matter)."""
    found_workspace = workspace_by_name(session, workspace_name)
    found = session.api.GetWorkspaceProjects(
        wpb.GetWorkspaceProjectsRequest(id=found_workspace.id, name=project_name)
    ).projects
    if not found:
        raise CliError(f"no project named {project_name!r} in workspace {found_workspace.name!r}")
    return found[0]


@project.command(name="list")
@click.argument("workspace_name")
@json_option
@pass_state
def list_projects(state: CliState, workspace_name: str, as_json: bool) -> None:
    """List the projects of workspace WORKSPACE_NAME."""
    session = state.session()
    projects = workspace_projects(session, workspace_by_name(session, workspace_name).id)
    if as_json:
        print_json(wpb.GetWorkspaceProjectsResponse(projects=projects))
        return
    print_renderable(build_table(PROJECT_COLUMNS, [project_row(p) for p in projects]))


@project.command()
@click.argument("workspace_name")
@click.argument("name")
@click.option("--description", default=None, help="What the project is for.")
@click.option("--key", default=None, help="Up to 5 letters and digits (default: made from the name).")
@json_option
@pass_state
def create(
    state: CliState, workspace_name: str, name: str, description: str | None, key: str | None, as_json: bool
) -> None:
    """Create project NAME in workspace WORKSPACE_NAME."""
    session = state.session()
    request = wpb.PostProjectRequest(
        workspace_id=workspace_by_name(session, workspace_name).id,
        name=name,
        description=description,
        key=key,
    )
    created = session.api.PostProject(request).project
    if as_json:
        print_json(created)
        return
    click.echo(
        f"Created project {created.id} ({printable(created.workspace_name)} / {printable(created.name)}, "
        f"key {printable(created.key)})"
    )


@project.command()
@click.argument("workspace_name")
@click.argument("project_name")
@click.option("--all", "include_archived", is_flag=True, help="Include archived experiments.")
@json_option
@pass_state
def describe(
    state: CliState, workspace_name: str, project_name: str, include_archived: bool, as_json: bool
) -> None:
    """Show project PROJECT_NAME of workspace WORKSPACE_NAME and its experiments."""
    session = state.session()
    found = project_by_name(session, workspace_name, project_name)

    def page(offset: int, limit: int) -> experiment_pb2.GetExperimentsResponse:
        request = experiment_pb2.GetExperimentsRequest(project_id=found.id, offset=offset, limit=limit)
        if not include_archived:
            request.archived = False
        return session.api.GetExperiments(request)

    experiments = fetch_all(page, "experiments")
    if as_json:
        print_json(
            {"project": message_to_dict(found), "experiments": [message_to_dict(e) for e in experiments]}
        )
        return
    started = found.last_experiment_started_at if found.HasField("last_experiment_started_at") else None
    pairs = [
        ("ID", str(found.id)),
        ("Key", found.key),
        ("Name", found.name),
        ("Workspace", found.workspace_name),
        ("Owner", found.username),
        ("Description", found.description),
        ("Archived", bool_text(found.archived)),
        ("Built in", bool_text(found.immutable)),
        ("Experiments", f"{found.num_experiments} ({found.num_active_experiments} active)"),
        ("Trials", str(found.num_runs)),
        ("Last experiment", timestamp_text(started)),
        ("Deletion", deletion_state(found.state, found.error_message)),
    ]
    print_renderable(key_value_table([(key, value) for key, value in pairs if value]))
    rows = [experiment_row(e, show_archived=include_archived) for e in experiments]
    print_renderable(build_table(EXPERIMENT_COLUMNS, rows, title="Experiments"))

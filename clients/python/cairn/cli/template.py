"""`cairn template list | describe | create | set | remove`: config templates, which
`cairn experiment create --template NAME` merges under an experiment's config."""

from __future__ import annotations

from pathlib import Path

import click
import yaml
from google.protobuf import json_format, struct_pb2

from cairn.api.v1 import common_pb2
from cairn.api.v1 import template_pb2 as tpb
from cairn.cli.errors import CliError
from cairn.cli.groups import AliasedGroup
from cairn.cli.output import build_table, print_json, print_renderable
from cairn.cli.paging import fetch_all
from cairn.cli.state import CliState, json_option, pass_state
from cairn.wire import value_to_python, whole_numbers

_TEMPLATE_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


@click.group(cls=AliasedGroup, aliases={"ls": "list", "rm": "remove"})
def template() -> None:
    """Config templates: experiment-config fields shared by many experiments."""


def _config_yaml(message: tpb.Template) -> str:
    return yaml.safe_dump(whole_numbers(value_to_python(message.config)), sort_keys=False).rstrip("\n")


def _read_config(path: Path) -> struct_pb2.Value:
    """The template file as a Value; whether it is a valid template is the master's to say."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise CliError(f"{path}: not valid YAML: {exc}") from None
    try:
        return json_format.ParseDict(data, struct_pb2.Value())
    except json_format.ParseError as exc:
        raise CliError(f"{path}: holds a value JSON cannot carry: {exc}") from None


@template.command(name="list")
@click.option("-d", "--details", is_flag=True, help="Show each template's config.")
@json_option
@pass_state
def list_templates(state: CliState, details: bool, as_json: bool) -> None:
    """List the config templates, by name."""
    api = state.session().api
    found = fetch_all(
        lambda offset, limit: api.GetTemplates(
            tpb.GetTemplatesRequest(
                sort_by=tpb.GetTemplatesRequest.SORT_BY_NAME,
                order_by=common_pb2.ORDER_BY_ASC,
                offset=offset,
                limit=limit,
            )
        ),
        "templates",
    )
    if as_json:
        print_json(tpb.GetTemplatesResponse(templates=found))
        return
    columns = ["Name", "Workspace ID", *(["Config"] if details else [])]
    rows = [[t.name, str(t.workspace_id), *([_config_yaml(t)] if details else [])] for t in found]
    print_renderable(build_table(columns, rows))


@template.command()
@click.argument("name")
@json_option
@pass_state
def describe(state: CliState, name: str, as_json: bool) -> None:
    """Show the config of template NAME as YAML."""
    found = state.session().api.GetTemplate(tpb.GetTemplateRequest(template_name=name)).template
    if as_json:
        print_json(found)
        return
    click.echo(_config_yaml(found))


@template.command()
@click.argument("name")
@click.argument("template_file", type=_TEMPLATE_FILE)
@click.option(
    "--workspace-id", type=int, default=0, help="The template's workspace (default: the default one)."
)
@pass_state
def create(state: CliState, name: str, template_file: Path, workspace_id: int) -> None:
    """Create template NAME from TEMPLATE_FILE (YAML: experiment-config fields)."""
    config = _read_config(template_file)
    state.session().api.PostTemplate(
        tpb.PostTemplateRequest(template=tpb.Template(name=name, config=config, workspace_id=workspace_id))
    )
    click.echo(f"Created template {name}")


@template.command(name="set")
@click.argument("name")
@click.argument("template_file", type=_TEMPLATE_FILE)
@pass_state
def set_config(state: CliState, name: str, template_file: Path) -> None:
    """Replace the config of template NAME with TEMPLATE_FILE, creating the template if needed."""
    config = _read_config(template_file)
    state.session().api.PutTemplate(tpb.PutTemplateRequest(template=tpb.Template(name=name, config=config)))
    click.echo(f"Set template {name}")


@template.command()
@click.argument("name")
@pass_state
def remove(state: CliState, name: str) -> None:
    """Delete template NAME (experiments created with it keep their configs)."""
    state.session().api.DeleteTemplate(tpb.DeleteTemplateRequest(template_name=name))
    click.echo(f"Removed template {name}")

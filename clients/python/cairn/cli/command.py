"""`cairn cmd ...` (alias of `cairn command`): run a one-off command on the cluster, list, follow
its logs, kill it."""

from __future__ import annotations

from typing import IO, Any

import click
import yaml
from google.protobuf import struct_pb2

from cairn.api.v1 import command_pb2, task_pb2
from cairn.cli.groups import AliasedGroup
from cairn.cli.output import (
    build_table,
    enum_label,
    print_json,
    print_json_line,
    print_renderable,
    timestamp_text,
)
from cairn.cli.state import CliState, json_option, pass_state
from cairn.client.model_definition import build_model_definition
from cairn.client.session import Session
from cairn.printable import printable

COLUMNS = ("ID", "Owner", "Description", "State", "Exit status", "Resource pool", "Started")


def _row(command: command_pb2.Command) -> list[str]:
    return [
        command.id,
        command.username,
        command.description,
        enum_label(task_pb2.Allocation.State.Name(command.state)),
        command.exit_status,
        command.resource_pool,
        timestamp_text(command.start_time),
    ]


def _print_logs(session: Session, task_id: str, *, follow: bool, as_json: bool) -> None:
    for entry in session.api.TaskLogs(task_pb2.TaskLogsRequest(task_id=task_id, follow=follow)):
        if as_json:
            print_json_line(entry)
        else:
            click.echo(entry.log.rstrip("\r\n"))


@click.group(name="command", cls=AliasedGroup, aliases={"ls": "list"})
def command() -> None:
    """Commands: one-off programs run on the cluster's slots (or on none)."""


@command.command()
@click.argument("entrypoint", nargs=-1, required=True)
@click.option(
    "--context",
    "context_dir",
    type=click.Path(exists=True, file_okay=False),
    help="Copied into its working directory.",
)
@click.option(
    "--config-file",
    type=click.File("r"),
    help="A command config (YAML): resources, environment, bind_mounts.",
)
@click.option(
    "--slots", type=click.IntRange(min=0), default=None, help="Slots it needs (0: runs on no slot)."
)
@click.option("-d", "--detach", is_flag=True, help="Print its id and return; do not follow its logs.")
@pass_state
def run(
    state: CliState,
    entrypoint: tuple[str, ...],
    context_dir: str | None,
    config_file: IO[str] | None,
    slots: int | None,
    detach: bool,
) -> None:
    """Run ENTRYPOINT (one argument runs as a shell line: 'echo hi; exit 3')."""
    config: dict[str, Any] = (yaml.safe_load(config_file.read()) or {}) if config_file is not None else {}
    if not isinstance(config, dict):
        raise click.UsageError("--config-file: not a YAML mapping")
    config["entrypoint"] = list(entrypoint)
    if slots is not None:
        config.setdefault("resources", {})["slots"] = slots
    struct = struct_pb2.Struct()
    struct.update(config)
    request = command_pb2.LaunchCommandRequest(
        config=struct, files=build_model_definition(context_dir) if context_dir else []
    )
    session = state.session()
    launched = session.api.LaunchCommand(request).command
    if detach:
        click.echo(launched.id)
        return
    click.echo(f"Launched command {launched.id}: {printable(launched.description)}", err=True)
    _print_logs(session, launched.id, follow=True, as_json=False)


@command.command(name="list")
@click.option("-a", "--all", "everyone", is_flag=True, help="Everyone's commands, not only yours.")
@json_option
@pass_state
def list_commands(state: CliState, everyone: bool, as_json: bool) -> None:
    """List commands, oldest first."""
    session = state.session()
    mine = [session.username] if session.username and not everyone else []
    request = command_pb2.GetCommandsRequest(users=mine)
    response = session.api.GetCommands(request)
    if as_json:
        print_json(response)
        return
    print_renderable(build_table(COLUMNS, [_row(c) for c in response.commands]))


@command.command()
@click.argument("command_id")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until the command ends.")
@json_option
@pass_state
def logs(state: CliState, command_id: str, follow: bool, as_json: bool) -> None:
    """Print a command's logs (Ctrl-C stops following)."""
    _print_logs(state.session(), command_id, follow=follow, as_json=as_json)


@command.command()
@click.argument("command_ids", nargs=-1, required=True)
@pass_state
def kill(state: CliState, command_ids: tuple[str, ...]) -> None:
    """Kill commands (they end CANCELED)."""
    session = state.session()
    for command_id in command_ids:
        session.api.KillCommand(command_pb2.KillCommandRequest(command_id=command_id))
        click.echo(f"Killed command {command_id}")

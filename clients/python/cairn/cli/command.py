"""`cairn cmd ...` (alias of `cairn command`): run a one-off command on the cluster; the family's
list, describe, logs, kill and set-priority (task_kinds.py)."""

from __future__ import annotations

from typing import Any

import click

from cairn.api.v1 import command_pb2
from cairn.cli.state import CliState, pass_state
from cairn.cli.task_kinds import TaskKindCli, launch, launch_options, print_logs, task_group
from cairn.printable import printable

COMMAND = TaskKindCli(
    command_pb2, "Command", "Commands: one-off programs run on the cluster's slots (or none)."
)
command = task_group(COMMAND)


@command.command()
@click.argument("entrypoint", nargs=-1, required=True)
@launch_options("A command config (YAML): resources, environment, bind_mounts.", "do not follow its logs")
@pass_state
def run(state: CliState, /, entrypoint: tuple[str, ...], **options: Any) -> None:
    """Run ENTRYPOINT (one argument runs as a shell line: 'echo hi; exit 3')."""
    session = state.session()
    launched = launch(session, COMMAND, options, entrypoint=list(entrypoint))
    if launched is None:
        return
    click.echo(f"Launched command {launched.id}: {printable(launched.description)}", err=True)
    print_logs(session, launched.id, follow=True, as_json=False)

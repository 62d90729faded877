"""`cairn notebook ...`: start JupyterLab on the cluster, served only through the master's proxy
at /proxy/{id}/; the family's list, describe, logs, kill, set-priority and open (task_kinds.py)."""

from __future__ import annotations

from typing import Any

import click

from cairn.api.v1 import notebook_pb2
from cairn.cli import task_kinds as family
from cairn.cli.state import CliState, pass_state

NOTEBOOK = family.TaskKindCli(
    notebook_pb2,
    "Notebook",
    "Notebooks: JupyterLab on the cluster's slots (or on none), opened through the master.",
    http=True,
)
notebook = family.task_group(NOTEBOOK)


@notebook.command()
@family.launch_options(
    "A notebook config (YAML): resources, environment, idle_timeout.", "do not wait until it answers"
)
@family.timeout_option
@pass_state
def start(state: CliState, /, timeout: float, **options: Any) -> None:
    """Start JupyterLab and print its URL through the master once it answers."""
    session = state.session()
    launched = family.launch(session, NOTEBOOK, options)
    if launched is None:
        return
    click.echo(f"Launched notebook {launched.id}", err=True)
    family.wait_ready(session, NOTEBOOK, launched.id, timeout)
    click.echo(f"{family.master_http(session).url}{launched.service_address}")

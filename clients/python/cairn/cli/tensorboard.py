"""`cairn tensorboard ...`: start a TensorBoard of experiments or trials (served through the
master's proxy); the family's list, describe, logs, kill, set-priority and open (task_kinds.py)."""

from __future__ import annotations

from typing import IO

import click

from cairn.api.v1 import tensorboard_pb2 as tpb
from cairn.cli.state import CliState, pass_state
from cairn.cli.task_kinds import COLUMNS, TaskKindCli, launch_config, task_group, timeout_option, wait_ready

TENSORBOARD = TaskKindCli(
    tpb,
    "Tensorboard",
    "TensorBoards of experiments or trials, opened through the master at /proxy/{id}/.",
    noun="TensorBoard",
    # What it shows in place of a command's exit status and pool.
    columns=(
        *COLUMNS[:4],
        ("Experiments", lambda board: ", ".join(str(i) for i in board.experiment_ids)),
        ("Trials", lambda board: ", ".join(str(i) for i in board.trial_ids)),
        COLUMNS[-1],
    ),
    http=True,
)
tensorboard = task_group(TENSORBOARD)


@tensorboard.command()
@click.argument("experiment_ids", nargs=-1, type=click.IntRange(min=1))
@click.option(
    "-t", "--trial-ids", multiple=True, type=click.IntRange(min=1), help="A trial to show (repeatable)."
)
@click.option("--config-file", type=click.File("r"), help="A task config (YAML): resources, environment.")
@click.option("-d", "--detach", is_flag=True, help="Print its id and return; do not wait until it answers.")
@timeout_option
@pass_state
def start(
    state: CliState,
    experiment_ids: tuple[int, ...],
    trial_ids: tuple[int, ...],
    config_file: IO[str] | None,
    detach: bool,
    timeout: float,
) -> None:
    """Start a TensorBoard of EXPERIMENT_IDS' trials (or of --trial-ids)."""
    if not experiment_ids and not trial_ids:
        raise click.UsageError("name experiment ids or --trial-ids")
    session = state.session()
    config = launch_config(config_file)
    board = TENSORBOARD.launch(
        session, experiment_ids=list(experiment_ids), trial_ids=list(trial_ids), config=config
    )
    if detach:
        click.echo(board.id)
        return
    click.echo(f"Launched TensorBoard {board.id}: {board.description}", err=True)
    wait_ready(session, TENSORBOARD, board.id, timeout)
    click.echo(f"TensorBoard is running at {board.service_address} on the master's HTTP address")

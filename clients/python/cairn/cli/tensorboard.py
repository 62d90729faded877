"""`cairn tensorboard ...`: start a TensorBoard of experiments or trials (served through the
master's proxy), list and kill them."""

from __future__ import annotations

import time
from typing import IO, Any

import click
import yaml
from google.protobuf import struct_pb2

from cairn.api.v1 import notebook_pb2, task_pb2
from cairn.api.v1 import tensorboard_pb2 as tpb
from cairn.cli.groups import AliasedGroup
from cairn.cli.output import build_table, enum_label, print_json, print_renderable, timestamp_text
from cairn.cli.state import CliState, json_option, pass_state
from cairn.client.session import Session

COLUMNS = ("ID", "Owner", "Description", "State", "Experiments", "Trials", "Started")
READY_POLL_S = 1.0


def _row(board: tpb.Tensorboard) -> list[str]:
    return [
        board.id,
        board.username,
        board.description,
        enum_label(task_pb2.Allocation.State.Name(board.state)),
        ", ".join(str(i) for i in board.experiment_ids),
        ", ".join(str(i) for i in board.trial_ids),
        timestamp_text(board.start_time),
    ]


def _wait_ready(session: Session, task_id: str, timeout_s: float) -> bool:
    """Whether the TensorBoard answered through the proxy within `timeout_s`; raises if it ended."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        task = session.api.GetTask(notebook_pb2.GetTaskRequest(task_id=task_id)).task
        if task.HasField("end_time"):
            raise click.ClickException(f"TensorBoard {task_id} ended before it was ready (cairn task logs)")
        if task.allocations and task.allocations[0].is_ready:
            return True
        time.sleep(READY_POLL_S)
    return False


@click.group(name="tensorboard", cls=AliasedGroup, aliases={"ls": "list"})
def tensorboard() -> None:
    """TensorBoards of experiments or trials, opened through the master at /proxy/{id}/."""


@tensorboard.command()
@click.argument("experiment_ids", nargs=-1, type=click.IntRange(min=1))
@click.option(
    "-t", "--trial-ids", multiple=True, type=click.IntRange(min=1), help="A trial to show (repeatable)."
)
@click.option("--config-file", type=click.File("r"), help="A task config (YAML): resources, environment.")
@click.option("-d", "--detach", is_flag=True, help="Print its id and return; do not wait until it answers.")
@click.option(
    "--timeout", type=click.FloatRange(min=1), default=300.0, show_default=True, help="Seconds to wait."
)
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
    config: dict[str, Any] = (yaml.safe_load(config_file.read()) or {}) if config_file is not None else {}
    if not isinstance(config, dict):
        raise click.UsageError("--config-file: not a YAML mapping")
    struct = struct_pb2.Struct()
    struct.update(config)
    session = state.session()
    request = tpb.LaunchTensorboardRequest(
        experiment_ids=list(experiment_ids), trial_ids=list(trial_ids), config=struct
    )
    board = session.api.LaunchTensorboard(request).tensorboard
    if detach:
        click.echo(board.id)
        return
    click.echo(f"Launched TensorBoard {board.id}: {board.description}", err=True)
    if not _wait_ready(session, board.id, timeout):
        raise click.ClickException(
            f"TensorBoard {board.id} did not answer within {timeout:g}s; it keeps starting"
        )
    click.echo(f"TensorBoard is running at {board.service_address} on the master's HTTP address")


@tensorboard.command(name="list")
@click.option("-a", "--all", "everyone", is_flag=True, help="Everyone's TensorBoards, not only yours.")
@json_option
@pass_state
def list_tensorboards(state: CliState, everyone: bool, as_json: bool) -> None:
    """List TensorBoards, oldest first."""
    session = state.session()
    mine = [session.username] if session.username and not everyone else []
    response = session.api.GetTensorboards(tpb.GetTensorboardsRequest(users=mine))
    if as_json:
        print_json(response)
        return
    print_renderable(build_table(COLUMNS, [_row(board) for board in response.tensorboards]))


@tensorboard.command()
@click.argument("tensorboard_ids", nargs=-1, required=True)
@pass_state
def kill(state: CliState, tensorboard_ids: tuple[str, ...]) -> None:
    """Kill TensorBoards."""
    session = state.session()
    for tensorboard_id in tensorboard_ids:
        session.api.KillTensorboard(tpb.KillTensorboardRequest(tensorboard_id=tensorboard_id))
        click.echo(f"Killed TensorBoard {tensorboard_id}")

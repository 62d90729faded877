"""`cairn checkpoint ...` (alias `c`): list an experiment's checkpoints, describe one, download one."""

from __future__ import annotations

from pathlib import Path

import click

from cairn.api.v1 import checkpoint_pb2
from cairn.cli.groups import AliasedGroup
from cairn.cli.output import (
    build_table,
    bytes_text,
    enum_label,
    key_value_table,
    mapping_text,
    metric_text,
    print_json,
    print_renderable,
    struct_to_dict,
    timestamp_text,
)
from cairn.cli.paging import fetch_all
from cairn.cli.state import CliState, json_option, pass_state
from cairn.client.checkpoint_download import write_checkpoint

Checkpoint = checkpoint_pb2.Checkpoint
CHECKPOINT_COLUMNS = ("UUID", "Trial", "Steps", "State", "Size", "Searcher metric", "Reported")


@click.group(cls=AliasedGroup, aliases={"ls": "list"})
def checkpoint() -> None:
    """Checkpoints: the saved state of trials."""


def checkpoint_size(ckpt: Checkpoint) -> int:
    return sum(ckpt.resources.values())


def checkpoint_steps(ckpt: Checkpoint) -> str:
    steps = struct_to_dict(ckpt.metadata).get("steps_completed")
    return str(int(steps)) if isinstance(steps, int | float) else ""


def checkpoint_trial(ckpt: Checkpoint) -> str:
    return str(ckpt.training.trial_id) if ckpt.training.HasField("trial_id") else ""


def checkpoint_metric(ckpt: Checkpoint) -> float | None:
    return ckpt.training.searcher_metric if ckpt.training.HasField("searcher_metric") else None


def checkpoint_row(ckpt: Checkpoint) -> list[str]:
    return [
        ckpt.uuid,
        checkpoint_trial(ckpt),
        checkpoint_steps(ckpt),
        enum_label(Checkpoint.State.Name(ckpt.state)),
        bytes_text(checkpoint_size(ckpt)),
        metric_text(checkpoint_metric(ckpt)),
        timestamp_text(ckpt.report_time if ckpt.HasField("report_time") else None),
    ]


def checkpoint_summary(ckpt: Checkpoint) -> list[tuple[str, str]]:
    training = ckpt.training
    pairs = [
        ("UUID", ckpt.uuid),
        ("State", enum_label(Checkpoint.State.Name(ckpt.state))),
        ("Experiment", str(training.experiment_id) if training.HasField("experiment_id") else ""),
        ("Trial", checkpoint_trial(ckpt)),
        ("Steps", checkpoint_steps(ckpt)),
        ("Searcher metric", metric_text(checkpoint_metric(ckpt))),
        ("Validation metrics", mapping_text(struct_to_dict(training.validation_metrics.avg_metrics))),
        ("Training metrics", mapping_text(struct_to_dict(training.training_metrics.avg_metrics))),
        ("Hyperparameters", mapping_text(struct_to_dict(training.hparams))),
        ("Size", f"{bytes_text(checkpoint_size(ckpt))} in {len(ckpt.resources)} files"),
        ("Reported", timestamp_text(ckpt.report_time if ckpt.HasField("report_time") else None)),
        ("Task", ckpt.task_id),
        ("Allocation", ckpt.allocation_id if ckpt.HasField("allocation_id") else ""),
        ("Metadata", mapping_text(struct_to_dict(ckpt.metadata))),
    ]
    return [(key, value) for key, value in pairs if value]


@checkpoint.command(name="list")
@click.argument("experiment_id", type=int)
@json_option
@pass_state
def list_checkpoints(state: CliState, experiment_id: int, as_json: bool) -> None:
    """List the checkpoints of an experiment."""
    api = state.session().api

    def page(offset: int, limit: int) -> checkpoint_pb2.GetExperimentCheckpointsResponse:
        return api.GetExperimentCheckpoints(
            checkpoint_pb2.GetExperimentCheckpointsRequest(id=experiment_id, offset=offset, limit=limit)
        )

    checkpoints = fetch_all(page, "checkpoints")
    if as_json:
        print_json(checkpoint_pb2.GetExperimentCheckpointsResponse(checkpoints=checkpoints))
        return
    print_renderable(build_table(CHECKPOINT_COLUMNS, [checkpoint_row(c) for c in checkpoints]))


@checkpoint.command()
@click.argument("uuid")
@json_option
@pass_state
def describe(state: CliState, uuid: str, as_json: bool) -> None:
    """Show a checkpoint and its files."""
    response = state.session().api.GetCheckpoint(checkpoint_pb2.GetCheckpointRequest(checkpoint_uuid=uuid))
    if as_json:
        print_json(response)
        return
    ckpt = response.checkpoint
    print_renderable(key_value_table(checkpoint_summary(ckpt)))
    files = sorted(ckpt.resources.items())
    if files:
        print_renderable(build_table(("File", "Size"), [[name, bytes_text(size)] for name, size in files]))


@checkpoint.command()
@click.argument("uuid")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@pass_state
def download(state: CliState, uuid: str, directory: Path) -> None:
    """Download a checkpoint's files into DIRECTORY (through the master, whatever the storage)."""
    api = state.session().api
    chunks = api.DownloadCheckpoint(checkpoint_pb2.DownloadCheckpointRequest(checkpoint_uuid=uuid))
    summary = write_checkpoint(chunks, directory)
    click.echo(
        f"Downloaded checkpoint {uuid}: {summary.files} files, {bytes_text(summary.bytes)} into {directory}"
    )

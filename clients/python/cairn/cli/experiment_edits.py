"""`cairn experiment set ...` and `cairn experiment label ...`: changing an experiment after creation
(PatchExperiment), as Determined's `det experiment set|label` do. Scheduler-facing settings take
effect at the next scheduling pass."""

from __future__ import annotations

from typing import Any, TextIO

import click
from google.protobuf import struct_pb2

from cairn.api.v1 import experiment_pb2
from cairn.cli.groups import AliasedGroup
from cairn.cli.state import CliState, pass_state
from cairn.client.session import Session

Patch = experiment_pb2.PatchExperiment


def _patch(session: Session, patch: experiment_pb2.PatchExperiment) -> experiment_pb2.Experiment:
    return session.api.PatchExperiment(experiment_pb2.PatchExperimentRequest(experiment=patch)).experiment


@click.group(name="set", cls=AliasedGroup)
def set_group() -> None:
    """Change an experiment's name, description, notes or scheduling settings."""


@set_group.command()
@click.argument("experiment_id", type=int)
@click.argument("name")
@pass_state
def name(state: CliState, experiment_id: int, name: str) -> None:
    """Rename an experiment."""
    _patch(state.session(), Patch(id=experiment_id, name=name))
    click.echo(f"Set name of experiment {experiment_id} to {name!r}")


@set_group.command()
@click.argument("experiment_id", type=int)
@click.argument("description")
@pass_state
def description(state: CliState, experiment_id: int, description: str) -> None:
    """Set an experiment's description."""
    _patch(state.session(), Patch(id=experiment_id, description=description))
    click.echo(f"Set description of experiment {experiment_id}")


@set_group.command()
@click.argument("experiment_id", type=int)
@click.argument("notes_file", type=click.File("r"))
@pass_state
def notes(state: CliState, experiment_id: int, notes_file: TextIO) -> None:
    """Set an experiment's notes from a file (`-` reads standard input)."""
    _patch(state.session(), Patch(id=experiment_id, notes=notes_file.read()))
    click.echo(f"Set notes of experiment {experiment_id}")


def _resources_command(option: str, field: str, kind: type, help_text: str) -> None:
    @set_group.command(name=option, help=help_text)
    @click.argument("experiment_id", type=int)
    @click.argument("value", type=kind)
    @pass_state
    def command(state: CliState, experiment_id: int, value: int | float) -> None:
        values: dict[str, Any] = {field: value}
        resources = Patch.PatchResources(**values)
        _patch(state.session(), Patch(id=experiment_id, resources=resources))
        click.echo(f"Set {field} of experiment {experiment_id} to {value}")


_resources_command(
    "priority", "priority", int, "Set the scheduling priority (1-99, smaller runs first)."
)  # fmt: skip
_resources_command("weight", "weight", float, "Set the fair-share weight (> 0).")
_resources_command(
    "max-slots", "max_slots", int,
    "Cap the slots the experiment holds at once (0 lifts the cap); trials above it stop gracefully.",
)  # fmt: skip


@click.group(cls=AliasedGroup)
def label() -> None:
    """Add or remove an experiment's labels."""


def _set_labels(session: Session, experiment_id: int, change: str, value: str) -> None:
    current = list(
        session.api.GetExperiment(
            experiment_pb2.GetExperimentRequest(experiment_id=experiment_id)
        ).experiment.labels
    )
    if change == "add":
        wanted = current if value in current else [*current, value]
    else:
        wanted = [x for x in current if x != value]
    if wanted == current:
        return
    labels = struct_pb2.ListValue()
    labels.extend(wanted)
    _patch(session, Patch(id=experiment_id, labels=labels))


@label.command()
@click.argument("experiment_id", type=int)
@click.argument("value")
@pass_state
def add(state: CliState, experiment_id: int, value: str) -> None:
    """Add a label."""
    _set_labels(state.session(), experiment_id, "add", value)
    click.echo(f"Added label {value!r} to experiment {experiment_id}")


@label.command()
@click.argument("experiment_id", type=int)
@click.argument("value")
@pass_state
def remove(state: CliState, experiment_id: int, value: str) -> None:
    """Remove a label."""
    _set_labels(state.session(), experiment_id, "remove", value)
    click.echo(f"Removed label {value!r} from experiment {experiment_id}")

"""`cairn model ...` (alias `m`): the model registry. A model is a named collection of versions, each
a checkpoint; a registered checkpoint is never garbage collected. MODEL is a model's name or id."""

from __future__ import annotations

import click

from cairn.api.v1 import model_pb2
from cairn.cli.checkpoint import checkpoint_metric, checkpoint_steps, checkpoint_trial
from cairn.cli.groups import AliasedGroup
from cairn.cli.output import (
    bool_text,
    build_table,
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
from cairn.client.session import Session

Model = model_pb2.Model
ModelVersion = model_pb2.ModelVersion
MODEL_COLUMNS = ("ID", "Name", "Versions", "Owner", "Labels", "Archived", "Last updated")
VERSION_COLUMNS = (
    "Version",
    "Name",
    "Checkpoint",
    "Trial",
    "Steps",
    "Searcher metric",
    "Registered by",
    "Registered",
)


@click.group(cls=AliasedGroup, aliases={"ls": "list"})
def model() -> None:
    """The model registry: models and their versions (checkpoints)."""


def model_row(m: Model) -> list[str]:
    return [
        str(m.id),
        m.name,
        str(m.num_versions),
        m.username,
        ", ".join(m.labels),
        bool_text(m.archived),
        timestamp_text(m.last_updated_time if m.HasField("last_updated_time") else None),
    ]


def model_summary(m: Model) -> list[tuple[str, str]]:
    pairs = [
        ("ID", str(m.id)),
        ("Name", m.name),
        ("Description", m.description),
        ("Owner", m.username),
        ("Workspace", str(m.workspace_id)),
        ("Versions", str(m.num_versions)),
        ("Labels", ", ".join(m.labels)),
        ("Archived", bool_text(m.archived)),
        ("Created", timestamp_text(m.creation_time if m.HasField("creation_time") else None)),
        ("Last updated", timestamp_text(m.last_updated_time if m.HasField("last_updated_time") else None)),
        ("Metadata", mapping_text(struct_to_dict(m.metadata))),
        ("Notes", m.notes),
    ]
    return [(key, value) for key, value in pairs if value]


def version_row(v: ModelVersion) -> list[str]:
    ckpt = v.checkpoint
    return [
        str(v.version),
        v.name,
        ckpt.uuid,
        checkpoint_trial(ckpt),
        checkpoint_steps(ckpt),
        metric_text(checkpoint_metric(ckpt)),
        v.username,
        timestamp_text(v.creation_time if v.HasField("creation_time") else None),
    ]


def _versions(session: Session, name: str) -> tuple[Model, list[ModelVersion]]:
    api = session.api
    found: list[Model] = []

    def page(offset: int, limit: int) -> model_pb2.GetModelVersionsResponse:
        response = api.GetModelVersions(
            model_pb2.GetModelVersionsRequest(model_name=name, offset=offset, limit=limit)
        )
        found[:] = [response.model]
        return response

    versions = fetch_all(page, "model_versions")
    return found[0], versions


def _print_model(m: Model, versions: list[ModelVersion]) -> None:
    print_renderable(key_value_table(model_summary(m)))
    if versions:
        print_renderable(build_table(VERSION_COLUMNS, [version_row(v) for v in versions]))


@model.command(name="list")
@click.option("--archived/--unarchived", default=None, help="Only archived, or only unarchived, models.")
@click.option(
    "--label", "labels", multiple=True, help="Only models with this label (repeatable: all of them)."
)
@json_option
@pass_state
def list_models(state: CliState, archived: bool | None, labels: tuple[str, ...], as_json: bool) -> None:
    """List the models in the registry, by name."""
    api = state.session().api

    def page(offset: int, limit: int) -> model_pb2.GetModelsResponse:
        request = model_pb2.GetModelsRequest(
            sort_by=model_pb2.GetModelsRequest.SORT_BY_NAME, offset=offset, limit=limit, labels=labels
        )
        if archived is not None:
            request.archived = archived
        return api.GetModels(request)

    models = fetch_all(page, "models")
    if as_json:
        print_json(model_pb2.GetModelsResponse(models=models))
        return
    print_renderable(build_table(MODEL_COLUMNS, [model_row(m) for m in models]))


@model.command()
@click.argument("name")
@click.option("--description", default="", help="What the model is.")
@click.option("--label", "labels", multiple=True, help="A label (repeatable).")
@click.option("-w", "--workspace-name", default=None, help="The workspace (default: Uncategorized).")
@json_option
@pass_state
def create(
    state: CliState,
    name: str,
    description: str,
    labels: tuple[str, ...],
    workspace_name: str | None,
    as_json: bool,
) -> None:
    """Create a model named NAME."""
    request = model_pb2.PostModelRequest(name=name, description=description, labels=labels)
    if workspace_name is not None:
        request.workspace_name = workspace_name
    response = state.session().api.PostModel(request)
    if as_json:
        print_json(response)
        return
    click.echo(f"Created model {response.model.name!r} (id {response.model.id})")


@model.command()
@click.argument("name", metavar="MODEL")
@json_option
@pass_state
def describe(state: CliState, name: str, as_json: bool) -> None:
    """Show a model and its versions."""
    found, versions = _versions(state.session(), name)
    if as_json:
        print_json(model_pb2.GetModelVersionsResponse(model=found, model_versions=versions))
        return
    _print_model(found, versions)


@model.command(name="list-versions")
@click.argument("name", metavar="MODEL")
@json_option
@pass_state
def list_versions(state: CliState, name: str, as_json: bool) -> None:
    """List a model's versions, oldest first."""
    found, versions = _versions(state.session(), name)
    if as_json:
        print_json(model_pb2.GetModelVersionsResponse(model=found, model_versions=versions))
        return
    print_renderable(build_table(VERSION_COLUMNS, [version_row(v) for v in versions]))


@model.command(name="register-version")
@click.argument("name", metavar="MODEL")
@click.argument("checkpoint_uuid")
@click.option("--version-name", default="", help="A name for the version.")
@click.option("--comment", default="", help="A comment on the version.")
@json_option
@pass_state
def register_version(
    state: CliState, name: str, checkpoint_uuid: str, version_name: str, comment: str, as_json: bool
) -> None:
    """Register a COMPLETED checkpoint as MODEL's next version."""
    response = state.session().api.PostModelVersion(
        model_pb2.PostModelVersionRequest(
            model_name=name, checkpoint_uuid=checkpoint_uuid, name=version_name, comment=comment
        )
    )
    if as_json:
        print_json(response)
        return
    version = response.model_version
    click.echo(
        f"Registered checkpoint {checkpoint_uuid} as version {version.version} of {version.model.name!r}"
    )


@model.command()
@click.argument("name", metavar="MODEL")
@pass_state
def archive(state: CliState, name: str) -> None:
    """Archive a model: it keeps its versions but takes no edits or new versions."""
    state.session().api.ArchiveModel(model_pb2.ArchiveModelRequest(model_name=name))
    click.echo(f"Archived model {name!r}")


@model.command()
@click.argument("name", metavar="MODEL")
@pass_state
def unarchive(state: CliState, name: str) -> None:
    """Unarchive a model."""
    state.session().api.UnarchiveModel(model_pb2.UnarchiveModelRequest(model_name=name))
    click.echo(f"Unarchived model {name!r}")


@model.command(name="delete-version")
@click.argument("name", metavar="MODEL")
@click.argument("version", type=int)
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_state
def delete_version(state: CliState, name: str, version: int, yes: bool) -> None:
    """Delete one version of a model (its checkpoint stays, and may be deleted from then on)."""
    if not yes:
        click.confirm(f"Delete version {version} of model {name!r}?", abort=True, err=True)
    state.session().api.DeleteModelVersion(
        model_pb2.DeleteModelVersionRequest(model_name=name, model_version_num=version)
    )
    click.echo(f"Deleted version {version} of model {name!r}")


@model.command()
@click.argument("name", metavar="MODEL")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_state
def delete(state: CliState, name: str, yes: bool) -> None:
    """Delete a model and all its versions (their checkpoints stay)."""
    if not yes:
        click.confirm(f"Delete model {name!r} and all its versions?", abort=True, err=True)
    state.session().api.DeleteModel(model_pb2.DeleteModelRequest(model_name=name))
    click.echo(f"Deleted model {name!r}")

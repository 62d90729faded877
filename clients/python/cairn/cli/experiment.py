"""`cairn experiment ...` (alias `e`): create, list, describe, lifecycle actions, preview-search."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import yaml

from cairn.api.v1 import common_pb2, experiment_pb2, trial_pb2, workspace_pb2
from cairn.cli.choices import enum_choices, parse_enum
from cairn.cli.config_overrides import apply_overrides
from cairn.cli.experiment_follow import follow_experiment
from cairn.cli.experiment_views import (
    EXPERIMENT_COLUMNS,
    TRIAL_COLUMNS,
    experiment_row,
    experiment_summary,
    trial_row,
)
from cairn.cli.groups import AliasedGroup
from cairn.cli.output import (
    build_table,
    bytes_text,
    console,
    key_value_table,
    mapping_text,
    message_to_dict,
    print_json,
    print_renderable,
    struct_to_dict,
)
from cairn.cli.paging import fetch_all
from cairn.cli.project import project_by_name
from cairn.cli.state import CliState, json_option, pass_state
from cairn.client.model_definition import build_model_definition, model_definition_size
from cairn.client.session import Session
from cairn.printable import printable

Experiment = experiment_pb2.Experiment
SortBy = experiment_pb2.GetExperimentsRequest.SortBy

_LAUNCH_WARNINGS = {
    experiment_pb2.LAUNCH_WARNING_CURRENT_SLOTS_EXCEEDED: (
        "the experiment asks for more slots than the cluster has now; it will wait for them"
    ),
}


@click.group(cls=AliasedGroup, aliases={"ls": "list"})
def experiment() -> None:
    """Experiments: create, inspect and control them."""


# ---- create ----


@experiment.command()
@click.argument("config_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("model_dir", required=False, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--paused", is_flag=True, help="Create the experiment paused instead of starting it.")
@click.option("--validate-only", is_flag=True, help="Check the config and model definition; create nothing.")
@click.option("-f", "--follow", is_flag=True, help="Show the experiment live until it ends; exit 0/1/2.")
@click.option("--logs", is_flag=True, help="With --follow: also stream the first trial's logs.")
@click.option(
    "--template",
    metavar="NAME",
    help="Merge the config over config template NAME (its fields fill the gaps).",
)
@click.option(
    "--project-id",
    type=int,
    default=0,
    help="Create it in this project (default: the config's workspace/project, else Uncategorized).",
)
@json_option
@click.pass_context
def create(
    ctx: click.Context,
    config_file: Path,
    model_dir: Path | None,
    paused: bool,
    validate_only: bool,
    follow: bool,
    logs: bool,
    template: str | None,
    project_id: int,
    as_json: bool,
) -> None:
    """Create an experiment from CONFIG_FILE and the code in MODEL_DIR (default: the config's folder).

    With --follow the exit code tells how it ended: 0 COMPLETED, 1 ERROR, 2 CANCELED."""
    if logs and not follow:
        raise click.UsageError("--logs only works with --follow")
    if follow and (as_json or validate_only):
        raise click.UsageError("--follow cannot be combined with --json or --validate-only")
    state = ctx.find_object(CliState) or ctx.ensure_object(CliState)
    config_text = config_file.read_text(encoding="utf-8")
    context_dir = model_dir if model_dir is not None else config_file.resolve().parent
    files = build_model_definition(context_dir)
    err = console(stderr=True)
    size = bytes_text(model_definition_size(files))
    err.print(f"Model definition: {len(files)} entries, {size} from {context_dir}")
    request = experiment_pb2.CreateExperimentRequest(
        model_definition=files,
        config=config_text,
        validate_only=validate_only,
        activate=not paused,
        template=template,
        project_id=project_id,
    )
    session = state.session()
    response = session.api.CreateExperiment(request)
    if as_json:
        print_json(response)
        return
    for warning in response.warnings:
        text = _LAUNCH_WARNINGS.get(warning, experiment_pb2.LaunchWarning.Name(warning))
        click.echo(f"warning: {text}", err=True)
    if validate_only:
        click.echo("Experiment config and model definition are valid")
        return
    click.echo(f"Created experiment {response.experiment.id}")
    if follow:
        code = follow_experiment(
            session, response.experiment.id, stream_logs=logs, console=console(), error_console=err
        )
        ctx.exit(code)


# ---- list / describe ----


def _sort_choice() -> list[str]:
    return enum_choices(SortBy, "SORT_BY_")


@experiment.command(name="list")
@click.option(
    "--state",
    "states",
    multiple=True,
    metavar="STATE",
    help="Only experiments in this state (repeatable): "
    + ", ".join(enum_choices(Experiment.State, "STATE_")),
)
@click.option("--label", "labels", multiple=True, help="Only experiments with this label (repeatable).")
@click.option("--all", "include_archived", is_flag=True, help="Include archived experiments.")
@click.option(
    "--limit", type=int, default=0, help="Show at most this many (default: the master's page, 100)."
)
@click.option("--offset", type=int, default=0, help="Skip this many (negative: count from the end).")
@click.option("--sort", type=click.Choice(_sort_choice()), default=None, help="Sort by this field.")
@click.option("--desc", is_flag=True, help="Sort in descending order.")
@click.option("--project-id", type=int, default=0, help="Only the experiments of this project.")
@json_option
@pass_state
def list_experiments(
    state: CliState,
    states: tuple[str, ...],
    labels: tuple[str, ...],
    include_archived: bool,
    limit: int,
    offset: int,
    sort: str | None,
    desc: bool,
    project_id: int,
    as_json: bool,
) -> None:
    """List experiments."""
    request = experiment_pb2.GetExperimentsRequest(
        states=[parse_enum(Experiment.State, "STATE_", s, "--state") for s in states],
        labels=list(labels),
        project_id=project_id,
        limit=limit,
        offset=offset,
        order_by=common_pb2.ORDER_BY_DESC if desc else common_pb2.ORDER_BY_ASC,
    )
    if sort is not None:
        request.sort_by = parse_enum(SortBy, "SORT_BY_", sort, "--sort")
    if not include_archived:
        request.archived = False
    response = state.session().api.GetExperiments(request)
    if as_json:
        print_json(response)
        return
    rows = [experiment_row(exp, show_archived=include_archived) for exp in response.experiments]
    print_renderable(build_table(EXPERIMENT_COLUMNS, rows))
    total = response.pagination.total
    if total > len(rows):
        click.echo(f"Showing {len(rows)} of {total} experiments (use --limit/--offset for more)", err=True)


def experiment_trials(session: Session, experiment_id: int) -> list[trial_pb2.Trial]:
    def page(offset: int, limit: int) -> trial_pb2.GetExperimentTrialsResponse:
        return session.api.GetExperimentTrials(
            trial_pb2.GetExperimentTrialsRequest(experiment_id=experiment_id, offset=offset, limit=limit)
        )

    return fetch_all(page, "trials")


@experiment.command()
@click.argument("experiment_id", type=int)
@json_option
@pass_state
def describe(state: CliState, experiment_id: int, as_json: bool) -> None:
    """Show an experiment and its trials."""
    session = state.session()
    response = session.api.GetExperiment(experiment_pb2.GetExperimentRequest(experiment_id=experiment_id))
    trials = experiment_trials(session, experiment_id)
    if as_json:
        # GetExperimentResponse with every trial of the experiment added as "trials".
        print_json({**message_to_dict(response), "trials": [message_to_dict(t) for t in trials]})
        return
    job = response.job_summary if response.HasField("job_summary") else None
    print_renderable(key_value_table(experiment_summary(response.experiment, job)))
    print_renderable(build_table(TRIAL_COLUMNS, [trial_row(t) for t in trials], title="Trials"))


# ---- lifecycle ----


def _lifecycle_command(
    name: str, rpc: str, request_type: Any, id_field: str, done: str, help_text: str
) -> None:
    @experiment.command(name=name, help=help_text)
    @click.argument("experiment_id", type=int)
    @pass_state
    def command(state: CliState, experiment_id: int) -> None:
        getattr(state.session().api, rpc)(request_type(**{id_field: experiment_id}))
        click.echo(f"{done} experiment {experiment_id}")


_lifecycle_command(
    "pause", "PauseExperiment", experiment_pb2.PauseExperimentRequest, "id", "Pausing",
    "Pause: trials checkpoint and stop; activate resumes them.",
)  # fmt: skip
_lifecycle_command(
    "activate", "ActivateExperiment", experiment_pb2.ActivateExperimentRequest, "id", "Activated",
    "Activate a paused experiment.",
)  # fmt: skip
_lifecycle_command(
    "cancel", "CancelExperiment", experiment_pb2.CancelExperimentRequest, "id", "Canceling",
    "Cancel: trials checkpoint and stop for good.",
)  # fmt: skip
_lifecycle_command(
    "kill", "KillExperiment", experiment_pb2.KillExperimentRequest, "id", "Killing",
    "Kill: trials stop at once, without a checkpoint.",
)  # fmt: skip
_lifecycle_command(
    "archive", "ArchiveExperiment", experiment_pb2.ArchiveExperimentRequest, "id", "Archived",
    "Hide a finished experiment from default listings.",
)  # fmt: skip
_lifecycle_command(
    "unarchive", "UnarchiveExperiment", experiment_pb2.UnarchiveExperimentRequest, "id", "Unarchived",
    "Show an archived experiment in listings again.",
)  # fmt: skip


@experiment.command()
@click.argument("experiment_id", type=int)
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_state
def delete(state: CliState, experiment_id: int, yes: bool) -> None:
    """Delete an experiment, its trials, metrics, logs and checkpoints."""
    if not yes:
        click.confirm(
            f"Delete experiment {experiment_id} with all its checkpoints? This cannot be undone",
            abort=True,
            err=True,
        )
    state.session().api.DeleteExperiment(experiment_pb2.DeleteExperimentRequest(experiment_id=experiment_id))
    click.echo(f"Deleting experiment {experiment_id}")


@experiment.command()
@click.argument("experiment_id", type=int)
@click.argument("workspace_name")
@click.argument("project_name")
@pass_state
def move(state: CliState, experiment_id: int, workspace_name: str, project_name: str) -> None:
    """Move an experiment to project PROJECT_NAME of workspace WORKSPACE_NAME."""
    session = state.session()
    destination = project_by_name(session, workspace_name, project_name)
    session.api.MoveExperiment(
        workspace_pb2.MoveExperimentRequest(
            experiment_id=experiment_id, destination_project_id=destination.id
        )
    )
    click.echo(
        f"Moved experiment {experiment_id} to project "
        f"{printable(destination.workspace_name)} / {printable(destination.name)}"
    )


@experiment.command(name="continue")
@click.argument("experiment_id", type=int)
@click.option(
    "--config-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="YAML with the config fields to change.",
)
@click.option(
    "--config",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Change one config field, e.g. searcher.max_length.batches=200 (repeatable).",
)
@pass_state
def continue_experiment(
    state: CliState, experiment_id: int, config_file: Path | None, overrides: tuple[str, ...]
) -> None:
    """Resume an ended single-trial experiment: its trial trains on from its latest checkpoint,
    with the config changes given (e.g. a longer searcher.max_length)."""
    base = yaml.safe_load(config_file.read_text(encoding="utf-8")) if config_file else {}
    if not isinstance(base, dict):
        raise click.BadParameter("must hold a YAML mapping", param_hint="--config-file")
    override = apply_overrides(base, overrides)
    text = yaml.safe_dump(override, sort_keys=False) if override else ""
    state.session().api.ContinueExperiment(
        experiment_pb2.ContinueExperimentRequest(id=experiment_id, override_config=text)
    )
    click.echo(f"Continued experiment {experiment_id}")


# ---- preview-search ----


def search_summary_rows(summary: experiment_pb2.SearchSummary) -> list[list[str]]:
    rows = []
    for item in summary.trials:
        unit = item.unit
        if unit.max_length:
            length = "max length"
        elif unit.HasField("value"):
            length = f"{unit.value} {unit.name}" if unit.HasField("name") else str(unit.value)
        else:
            length = unit.name if unit.HasField("name") else ""
        rows.append([str(item.count), length])
    return rows


def previewed_trial_row(trial: experiment_pb2.PreviewedTrial) -> list[str]:
    return [
        trial.request_id,
        str(trial.bracket) if trial.bracket else "",
        " → ".join(str(length) for length in trial.lengths),
        mapping_text(struct_to_dict(trial.hparams)),
    ]


@experiment.command(name="preview-search")
@click.argument("config_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--seed", type=int, default=0, help="Searcher seed (default: the master's choice).")
@json_option
@pass_state
def preview_search(state: CliState, config_file: Path, seed: int, as_json: bool) -> None:
    """Show the trials the searcher would create for CONFIG_FILE, and how long each would train."""
    request = experiment_pb2.PreviewHPSearchRequest(
        config_text=config_file.read_text(encoding="utf-8"), seed=seed
    )
    response = state.session().api.PreviewHPSearch(request)
    if as_json:
        print_json(response)
        return
    print_renderable(build_table(("Trials", "Training length"), search_summary_rows(response.summary)))
    if response.previewed_trials:
        rows = [previewed_trial_row(t) for t in response.previewed_trials]
        print_renderable(
            build_table(("Request ID", "Bracket", "Lengths", "Hyperparameters"), rows, title="Trials")
        )

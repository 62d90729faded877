"""`cairn trial ...` (alias `t`): list, describe, logs."""

from __future__ import annotations

import click

from cairn.api.v1 import trial_pb2
from cairn.cli.experiment import experiment_trials
from cairn.cli.experiment_views import TRIAL_COLUMNS, trial_row, trial_summary
from cairn.cli.groups import AliasedGroup
from cairn.cli.output import build_table, key_value_table, print_json, print_json_line, print_renderable
from cairn.cli.state import CliState, json_option, pass_state
from cairn.cli.trial_logs import log_text, trial_log_entries


@click.group(cls=AliasedGroup, aliases={"ls": "list"})
def trial() -> None:
    """Trials: one set of hyperparameters of an experiment."""


@trial.command(name="list")
@click.argument("experiment_id", type=int)
@json_option
@pass_state
def list_trials(state: CliState, experiment_id: int, as_json: bool) -> None:
    """List the trials of an experiment."""
    trials = experiment_trials(state.session(), experiment_id)
    if as_json:
        print_json(trial_pb2.GetExperimentTrialsResponse(trials=trials))
        return
    print_renderable(build_table(TRIAL_COLUMNS, [trial_row(t) for t in trials]))


@trial.command()
@click.argument("trial_id", type=int)
@json_option
@pass_state
def describe(state: CliState, trial_id: int, as_json: bool) -> None:
    """Show a trial: state, metrics, checkpoints, hyperparameters."""
    response = state.session().api.GetTrial(trial_pb2.GetTrialRequest(trial_id=trial_id))
    if as_json:
        print_json(response)
        return
    print_renderable(key_value_table(trial_summary(response.trial)))


@trial.command()
@click.argument("trial_id", type=int)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until the trial ends.")
@click.option("--tail", type=click.IntRange(min=1), default=None, help="Start with the last N lines.")
@click.option(
    "--rank",
    "ranks",
    type=click.IntRange(min=0),
    multiple=True,
    help="Only the lines of this rank (repeatable); launchers tag each worker's lines with its rank.",
)
@json_option
@pass_state
def logs(
    state: CliState, trial_id: int, follow: bool, tail: int | None, ranks: tuple[int, ...], as_json: bool
) -> None:
    """Print a trial's logs (Ctrl-C stops following)."""
    for entry in trial_log_entries(state.session(), trial_id, follow=follow, tail=tail, ranks=ranks):
        if as_json:
            print_json_line(entry)
        else:
            click.echo(log_text(entry))

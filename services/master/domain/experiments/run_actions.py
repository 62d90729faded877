"""Determined's run actions (a run is a trial seen on its own): kill, pause, resume, move,
archive, unarchive and delete, on runs named by id or selected by Determined's run filter.

Every change goes through the lifecycle functions the single calls use: a run is killed as a trial
is (trials.stop), paused and resumed through its experiment (Determined pauses the experiment of a
single-trial run and refuses a run of a multi-trial search), moved with its experiment, and deleted
with its experiment when it is that experiment's only trial (deletion's bounded steps). Each run
is acted on in a unit of work of its own, under the same access check, and reports its own result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from sqlalchemy import func, select

from services.common.principal import Principal
from services.master.domain.experiments import experiments as lifecycle
from services.master.domain.experiments.bulk_actions import ActionResult, outcome
from services.master.domain.experiments.experiment_projects import move_experiment
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.errors import DomainError, FailedPrecondition, InvalidArgument, NotFound
from services.master.domain.kernel.states import TERMINAL, InvalidTransition, RunState
from services.master.domain.reads import visibility
from services.master.domain.reads.run_filter import parse_run_filter, run_filter_clause
from services.master.domain.trials import trials as trial_lifecycle
from services.master.store import models

S = RunState

MAX_RUNS = 1000


@dataclass(frozen=True)
class RunSelection:
    """The runs a call names: by ids (checked for existence one by one) or by filter."""

    ids: list[int]
    by_filter: bool


def select_runs(
    ctx: MasterContext,
    *,
    project_id: int | None,
    run_ids: Sequence[int],
    filter_text: str | None,
    project_field: str = "projectId",
    visible: visibility.Workspaces = None,
) -> RunSelection:
    """Bound and resolve the runs a call names, before anything changes."""
    if filter_text is not None and run_ids:
        raise InvalidArgument("runIds: if filter is provided run id list must be empty")
    if filter_text is None:
        ids = list(dict.fromkeys(run_ids))
        if len(ids) > MAX_RUNS:
            raise InvalidArgument(f"runIds: at most {MAX_RUNS} ids in one call")
        return RunSelection(ids=ids, by_filter=False)
    parsed = parse_run_filter(filter_text)
    with ctx.db.read() as s:
        q = (
            select(models.Trial.id)
            .join(models.Experiment, models.Experiment.id == models.Trial.experiment_id)
            .where(
                models.Experiment.state.not_in([S.DELETING, S.DELETED]),
                run_filter_clause(parsed, s.get_bind().dialect.name),
            )
            .order_by(models.Trial.id)
            .limit(MAX_RUNS + 1)
        )
        if project_id is not None:
            q = q.where(models.Experiment.project_id == project_id)
        # A filter selects only runs the caller may see (the rest would be refused one by one).
        ids = list(s.scalars(visibility.experiments(q, visible)))
    if len(ids) > MAX_RUNS:
        raise InvalidArgument(f"filter: selects more than {MAX_RUNS} runs; narrow it or name ids")
    return RunSelection(ids=ids, by_filter=True)


def _load(w: Work, run_id: int, project_id: int | None) -> tuple[models.Trial, models.Experiment]:
    trial = w.session.get(models.Trial, run_id)
    exp = None if trial is None else w.session.get(models.Experiment, trial.experiment_id)
    if trial is None or exp is None or exp.state in (S.DELETING, S.DELETED):
        raise NotFound(_not_found(run_id, project_id))
    if project_id is not None and exp.project_id != project_id:
        raise NotFound(_not_found(run_id, project_id))
    return trial, exp


def _not_found(run_id: int, project_id: int | None) -> str:
    if project_id is None:
        return f"Run with id '{run_id}' not found"
    return f"Run with id '{run_id}' not found in project with id '{project_id}'"


def _is_archived(w: Work, trial: models.Trial, exp: models.Experiment) -> bool:
    project = w.session.get_one(models.Project, exp.project_id)
    workspace = w.session.get_one(models.Workspace, project.workspace_id)
    return trial.archived or exp.archived or project.archived or workspace.archived


def _trial_count(w: Work, experiment_id: int) -> int:
    return int(
        w.session.scalar(
            select(func.count(models.Trial.id)).where(models.Trial.experiment_id == experiment_id)
        )
        or 0
    )


def _is_multitrial(exp: models.Experiment) -> bool:
    """Determined's test: a search other than `single` may run many trials."""
    searcher = exp.config.get("searcher") or {}
    return (searcher.get("name") if isinstance(searcher, dict) else None) != "single"


def _each(
    ctx: MasterContext,
    principal: Principal,
    selection: RunSelection,
    project_id: int | None,
    do: Callable[[Work, models.Trial, models.Experiment], None],
    permission: Permission = Permission.UPDATE_EXPERIMENT,
) -> list[ActionResult]:
    def change(run_id: int) -> None:
        with ctx.unit_of_work() as w:
            trial, exp = _load(w, run_id, project_id)
            lifecycle.check_can_modify(w.session, principal, exp, permission)
            do(w, trial, exp)

    return [outcome(i, "run", partial(change, i)) for i in selection.ids]


def kill(
    ctx: MasterContext, principal: Principal, selection: RunSelection, project_id: int | None
) -> list[ActionResult]:
    def do(w: Work, trial: models.Trial, exp: models.Experiment) -> None:
        if trial.state in TERMINAL:
            return  # Determined: killing an ended run is no error
        trial_lifecycle.stop(ctx, w, trial, exp, S.STOPPING_KILLED)

    return _each(ctx, principal, selection, project_id, do)


def pause_or_resume(
    ctx: MasterContext, principal: Principal, selection: RunSelection, project_id: int, *, pause: bool
) -> list[ActionResult]:
    def do(w: Work, trial: models.Trial, exp: models.Experiment) -> None:
        if _is_archived(w, trial, exp):
            raise FailedPrecondition("Run is archived.")
        if _is_multitrial(exp):
            raise FailedPrecondition(f"Cannot pause/unpause run '{trial.id}' (part of multi-trial).")
        try:
            if exp.state in TERMINAL:
                raise FailedPrecondition("experiment in terminal state")
            if pause:
                lifecycle.pause(ctx, w, exp)
            else:
                lifecycle.activate(ctx, w, exp)
        except (DomainError, InvalidTransition) as exc:
            verb = "pause" if pause else "resume"
            raise FailedPrecondition(f"Failed to {verb} associated experiment: {exc}") from exc

    return _each(ctx, principal, selection, project_id, do)


def set_archived(
    ctx: MasterContext, principal: Principal, selection: RunSelection, project_id: int, *, archived: bool
) -> list[ActionResult]:
    def do(w: Work, trial: models.Trial, exp: models.Experiment) -> None:
        if trial.archived == archived:
            return
        if trial.state not in TERMINAL:
            raise FailedPrecondition("Run is not in terminal state.")
        trial.archived = archived

    return _each(ctx, principal, selection, project_id, do, Permission.UPDATE_EXPERIMENT_METADATA)


def move(
    ctx: MasterContext,
    principal: Principal,
    selection: RunSelection,
    source_project_id: int,
    destination_project_id: int,
    *,
    skip_multitrial: bool,
) -> list[ActionResult]:
    """A run moves with its experiment (and so with the experiment's other runs)."""

    def do(w: Work, trial: models.Trial, exp: models.Experiment) -> None:
        if _is_archived(w, trial, exp):
            raise FailedPrecondition("Run is archived.")
        if skip_multitrial and _is_multitrial(exp):
            raise FailedPrecondition(f"Skipping run '{trial.id}' (part of multi-trial).")
        move_experiment(ctx, w, principal, exp.id, destination_project_id)

    return _each(ctx, principal, selection, source_project_id, do)


def delete(
    ctx: MasterContext, principal: Principal, selection: RunSelection, project_id: int | None
) -> list[ActionResult]:
    """A run is deleted with its experiment, by deletion's bounded steps; a run that shares its
    experiment with other runs is refused (Cairn deletes experiments whole)."""

    def do(w: Work, trial: models.Trial, exp: models.Experiment) -> None:
        if trial.state not in TERMINAL:
            raise FailedPrecondition("Run is not in a terminal state.")
        others = _trial_count(w, exp.id) - 1
        if others:
            raise FailedPrecondition(
                f"run {trial.id} shares experiment {exp.id} with {others} other run(s): "
                "Cairn deletes a run with its experiment; delete the experiment"
            )
        lifecycle.mark_deleting(ctx, w, exp)

    return _each(ctx, principal, selection, project_id, do, Permission.DELETE_EXPERIMENT)

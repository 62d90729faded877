"""Actions on many experiments of a project at once (Determined's KillExperiments, PauseExperiments,
ActivateExperiments, CancelExperiments, ArchiveExperiments, UnarchiveExperiments, DeleteExperiments
and MoveExperiments), named by ids or by Determined's bulk filters.

Each experiment is acted on in a unit of work of its own, through the same lifecycle functions and
access check as the single-experiment calls, so one that fails (not found, not its caller's, in a
state that forbids the action) is reported with its error and does not stop the others. The ids,
and the experiments a filter selects, are bounded before anything is changed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

from sqlalchemy import select

from services.common.logging import get_logger
from services.common.principal import Principal
from services.master.domain.experiments import experiments as lifecycle
from services.master.domain.experiments.experiment_projects import move_experiment
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.errors import DomainError, FailedPrecondition, InvalidArgument, NotFound
from services.master.domain.kernel.states import TERMINAL, InvalidTransition, RunState
from services.master.domain.reads import visibility
from services.master.store import models

log = get_logger(__name__)

S = RunState

# Determined's project id meaning "in any project".
ANY_PROJECT = -1
# The most experiments one call acts on, by ids or by filter.
MAX_EXPERIMENTS = 1000
MAX_FILTER_TEXT = 1024
MAX_FILTER_LIST = 1000


@dataclass(frozen=True)
class BulkFilters:
    """Determined's BulkExperimentFilters: every given condition must hold."""

    name: str = ""
    description: str = ""
    labels: tuple[str, ...] = ()
    archived: bool | None = None
    states: tuple[str, ...] = ()
    user_ids: tuple[int, ...] = ()
    project_id: int = 0
    excluded_ids: tuple[int, ...] = field(default=())


@dataclass(frozen=True)
class ActionResult:
    """One experiment's outcome: error is "" where the action was done (or already so)."""

    id: int
    error: str


Action = Callable[[MasterContext, Work, Principal, models.Experiment], None]


def outcome(item_id: int, what: str, change: Callable[[], None]) -> ActionResult:
    """Run one id's change (its own unit of work) and say how it went: a refusal is that id's
    error, and so is anything unexpected (logged), so the call answers for every id and no
    error reply hides the ids already changed."""
    try:
        change()
    except (DomainError, InvalidTransition) as exc:
        return ActionResult(id=item_id, error=str(exc))
    except Exception:
        log.exception("bulk action failed", what=what, id=item_id)
        return ActionResult(id=item_id, error=f"internal error: {what} {item_id} was not changed")
    return ActionResult(id=item_id, error="")


def _kill(ctx: MasterContext, w: Work, principal: Principal, exp: models.Experiment) -> None:
    if exp.state not in TERMINAL:  # Determined: a kill of an ended experiment is no error
        lifecycle.kill(ctx, w, exp)


def _cancel(ctx: MasterContext, w: Work, principal: Principal, exp: models.Experiment) -> None:
    if exp.state not in TERMINAL:
        lifecycle.cancel(ctx, w, exp)


def _check_live(exp: models.Experiment) -> None:
    if exp.state in TERMINAL:
        raise FailedPrecondition("experiment in terminal state")


def _pause(ctx: MasterContext, w: Work, principal: Principal, exp: models.Experiment) -> None:
    _check_live(exp)
    lifecycle.pause(ctx, w, exp)


def _activate(ctx: MasterContext, w: Work, principal: Principal, exp: models.Experiment) -> None:
    _check_live(exp)
    lifecycle.activate(ctx, w, exp)


def _archive(ctx: MasterContext, w: Work, principal: Principal, exp: models.Experiment) -> None:
    if exp.archived:
        raise FailedPrecondition("Experiment is already archived.")
    if exp.state not in TERMINAL:
        raise FailedPrecondition("Experiment is not in terminal state.")
    lifecycle.set_archived(w, exp, True)


def _unarchive(ctx: MasterContext, w: Work, principal: Principal, exp: models.Experiment) -> None:
    if not exp.archived:
        raise FailedPrecondition("Experiment is not archived.")
    lifecycle.set_archived(w, exp, False)


def _delete(ctx: MasterContext, w: Work, principal: Principal, exp: models.Experiment) -> None:
    lifecycle.mark_deleting(ctx, w, exp)


ACTIONS: dict[str, Action] = {
    "kill": _kill,
    "cancel": _cancel,
    "pause": _pause,
    "activate": _activate,
    "archive": _archive,
    "unarchive": _unarchive,
    "delete": _delete,
}

# What each action takes (identity/access.py decides): its lifecycle, its metadata, or its deletion.
PERMISSIONS: dict[str, Permission] = {
    "kill": Permission.UPDATE_EXPERIMENT,
    "cancel": Permission.UPDATE_EXPERIMENT,
    "pause": Permission.UPDATE_EXPERIMENT,
    "activate": Permission.UPDATE_EXPERIMENT,
    "archive": Permission.UPDATE_EXPERIMENT_METADATA,
    "unarchive": Permission.UPDATE_EXPERIMENT_METADATA,
    "delete": Permission.DELETE_EXPERIMENT,
}

# What a filter selects when it names no states (Determined's defaults per action).
_LIVE = (S.ACTIVE, S.PAUSED, S.STOPPING_CANCELED, S.STOPPING_KILLED, S.STOPPING_COMPLETED, S.STOPPING_ERROR)
DEFAULT_STATES: dict[str, tuple[str, ...]] = {
    "kill": _LIVE,
    "cancel": _LIVE,
    "pause": (S.ACTIVE,),
    "activate": (S.PAUSED,),
    "archive": tuple(TERMINAL),
    "delete": tuple(TERMINAL),
}
# Actions Determined applies to unarchived experiments only (an archived one is "not found").
_UNARCHIVED_ONLY = frozenset({"kill", "cancel", "pause", "activate"})


def check_filters(filters: BulkFilters) -> None:
    """Bad filters are refused before anything is read, naming the field."""
    for name, text in (("filters.name", filters.name), ("filters.description", filters.description)):
        if len(text) > MAX_FILTER_TEXT:
            raise InvalidArgument(f"{name}: at most {MAX_FILTER_TEXT} characters")
    for name, items in (
        ("filters.labels", filters.labels),
        ("filters.states", filters.states),
        ("filters.userIds", filters.user_ids),
        ("filters.excludedExperimentIds", filters.excluded_ids),
    ):
        if len(items) > MAX_FILTER_LIST:
            raise InvalidArgument(f"{name}: at most {MAX_FILTER_LIST} entries")


def check_ids(ids: Sequence[int], field_name: str) -> list[int]:
    """The ids in order, each once; at most MAX_EXPERIMENTS."""
    unique = list(dict.fromkeys(ids))
    if len(unique) > MAX_EXPERIMENTS:
        raise InvalidArgument(f"{field_name}: at most {MAX_EXPERIMENTS} ids in one call")
    return unique


def select_by_filters(
    ctx: MasterContext,
    project_id: int,
    filters: BulkFilters,
    action: str,
    visible: visibility.Workspaces = None,
) -> list[int]:
    """The ids of the experiments `filters` select in the project, for `action` (refused, naming
    the field, where they select more than MAX_EXPERIMENTS)."""
    check_filters(filters)
    states = filters.states or DEFAULT_STATES.get(action, ())
    # Only experiments the caller may see (the rest would be refused one by one, naming them).
    q = visibility.experiments(
        select(models.Experiment.id, models.Experiment.labels).where(
            models.Experiment.state.not_in([S.DELETING, S.DELETED])
        ),
        visible,
    )
    if project_id != ANY_PROJECT:
        q = q.where(models.Experiment.project_id == project_id)
    if filters.project_id:
        q = q.where(models.Experiment.project_id == filters.project_id)
    if filters.name:
        q = q.where(models.Experiment.name.icontains(filters.name, autoescape=True))
    if filters.description:
        q = q.where(models.Experiment.description.icontains(filters.description, autoescape=True))
    if filters.archived is not None:
        q = q.where(models.Experiment.archived.is_(filters.archived))
    if action in _UNARCHIVED_ONLY or action == "archive":
        q = q.where(models.Experiment.archived.is_(False))
    if action == "unarchive":
        q = q.where(models.Experiment.archived.is_(True))
    if states:
        q = q.where(models.Experiment.state.in_(list(states)))
    if filters.user_ids:
        q = q.where(models.Experiment.owner_id.in_(filters.user_ids))
    if filters.excluded_ids:
        q = q.where(models.Experiment.id.not_in(filters.excluded_ids))
    # Labels live in a JSON list: checked here, over rows already bounded by the limit below
    # where no labels are asked for, and over at most the limit's worth of matches otherwise.
    wanted = set(filters.labels)
    ids: list[int] = []
    with ctx.db.read() as s:
        for experiment_id, labels in s.execute(q.order_by(models.Experiment.id)):
            if wanted and not wanted <= set(labels or []):
                continue
            ids.append(experiment_id)
            if len(ids) > MAX_EXPERIMENTS:
                raise InvalidArgument(
                    f"filters: select more than {MAX_EXPERIMENTS} experiments; narrow them or name ids"
                )
    return ids


def _in_project(w: Work, experiment_id: int, project_id: int) -> models.Experiment:
    exp = lifecycle.load(w, experiment_id)
    if project_id not in (ANY_PROJECT, exp.project_id):
        raise NotFound(f"experiment '{experiment_id}' not found in project with id '{project_id}'")
    return exp


def act(
    ctx: MasterContext,
    principal: Principal,
    action: str,
    project_id: int,
    ids: list[int],
) -> list[ActionResult]:
    """`action` on each of `ids` (already bounded), one unit of work each."""
    do = ACTIONS[action]

    def change(experiment_id: int) -> None:
        with ctx.unit_of_work() as w:
            exp = _in_project(w, experiment_id, project_id)
            if action in _UNARCHIVED_ONLY and exp.archived:
                raise NotFound(f"experiment '{experiment_id}' is archived")
            lifecycle.check_can_modify(w.session, principal, exp, PERMISSIONS[action])
            do(ctx, w, principal, exp)

    return [outcome(i, "experiment", partial(change, i)) for i in ids]


def move(
    ctx: MasterContext, principal: Principal, project_id: int, ids: list[int], destination_project_id: int
) -> list[ActionResult]:
    """Move each of `ids` (already bounded) to the destination project, one unit of work each."""

    def change(experiment_id: int) -> None:
        with ctx.unit_of_work() as w:
            _in_project(w, experiment_id, project_id)
            move_experiment(ctx, w, principal, experiment_id, destination_project_id)

    return [outcome(i, "experiment", partial(change, i)) for i in ids]

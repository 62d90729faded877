"""Continuing an ended experiment: Determined 0.38's `det experiment continue ID --config ...`.

For a single-searcher experiment (one trial) that has ended (COMPLETED, CANCELED or ERROR), the
override config is merged into the experiment's config as Determined merges it (the override's
values win; template_merge.py), the experiment goes back to ACTIVE and its trial resumes in place
from its latest checkpoint: the same trial id, its metrics and checkpoints kept, its restarts
counted from zero. A longer `searcher.max_length` thus trains the trial on to the new length, after
which it completes again.

The search restarts as a new session of the same spec: a search is deterministic in its seed and
hyperparameters (which may not change), so the new session asks again for the trial the experiment
already has, by the same request id, and the master hands it that trial instead of a new one.

A grid or random search (which takes no override) that has ended with trials not completed goes
back to ACTIVE too, its search started again as a new session: it asks again for the trials the
experiment has, and those not completed (ERROR, CANCELED) are retried in place while the completed
ones are kept (search_retries.py); every trial's restarts count from zero, as in Determined.

Refused, with nothing changed (Determined's checks, api_experiment.go ContinueExperiment):
- searchers other than single, grid and random; an override config for grid or random; a grid or
  random search that completed with every trial completed (there is nothing to retry);
- an experiment still running (only an ended one continues), or archived;
- an override naming `project` or `workspace`, changing the searcher away from single, changing the
  hyperparameters, the experiment seed or where checkpoints are stored (the trial resumes from a
  checkpoint there), or giving an invalid config;
- anyone but the owner changing more than what bounds the training (Determined's
  continueNonOwnerFields: an admin continues the owner's code, which runs as the owner).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from cairn.searcher.v1 import searcher_pb2 as spb
from services.common.logging import get_logger
from services.common.principal import Principal
from services.master.domain.config import (
    ConfigDefaults,
    ConfigError,
    config_view,
    expand_config,
    parse_config_text,
)
from services.master.domain.config.policies import check_config_policy
from services.master.domain.config.template_merge import merge_template
from services.master.domain.experiments import experiment_edits, search_snapshots
from services.master.domain.experiments import experiments as experiment_lifecycle
from services.master.domain.experiments.creation import default_storage, search_spec
from services.master.domain.experiments.searcher_actions import apply_response
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
)
from services.master.domain.kernel.states import TERMINAL, RunState
from services.master.domain.trials import searcher_outbox
from services.master.domain.trials import trials as trial_lifecycle
from services.master.domain.workspaces import pool_bindings
from services.master.store import models

log = get_logger(__name__)

S = RunState

# An override is a few keys; these bound its text and what its YAML expands to (aliases included).
MAX_OVERRIDE_CHARS = 256 * 1024
MAX_OVERRIDE_NODES = 10_000

# What anyone but the owner may change when continuing (Determined's continueNonOwnerFields): what
# names the experiment or bounds the training it already does, never what it runs or runs with.
NON_OWNER_FIELDS: tuple[tuple[str, ...], ...] = (
    ("name",),
    ("description",),
    ("labels",),
    ("max_restarts",),
    ("searcher", "max_length"),
    ("checkpoint_storage", "save_experiment_best"),
    ("checkpoint_storage", "save_trial_best"),
    ("checkpoint_storage", "save_trial_latest"),
)
# The checkpoint storage fields that may change: the GC policy, not where checkpoints are.
STORAGE_POLICY_FIELDS = frozenset(path[1] for path in NON_OWNER_FIELDS if path[0] == "checkpoint_storage")
# Determined continues these searchers; Cairn runs `single` and refuses the other two with a reason.
CONTINUABLE_SEARCHERS = ("single", "grid", "random")


@dataclass(frozen=True)
class _Plan:
    """What a continue will write, decided from the experiment as read before the searcher is asked."""

    config: dict[str, Any]
    state: str
    config_version: int
    single: bool
    trial_id: int | None
    request_id: str | None


def parse_override(text: str) -> dict[str, Any]:
    """The override config in `text` (YAML or JSON; empty: no change), bounded before it is used."""
    if len(text) > MAX_OVERRIDE_CHARS:
        raise InvalidArgument(f"override_config: at most {MAX_OVERRIDE_CHARS} characters (got {len(text)})")
    if not text.strip():
        return {}
    try:
        override = parse_config_text(text)
    except ConfigError as exc:
        raise InvalidArgument(f"override_config: {exc}") from None
    if _nodes(override, MAX_OVERRIDE_NODES) > MAX_OVERRIDE_NODES:
        raise InvalidArgument(f"override_config: more than {MAX_OVERRIDE_NODES} values")
    for key, what in (("project", "project"), ("workspace", "workspace")):
        if key in override:
            raise InvalidArgument(
                f"override_config.{key}: cannot be given when continuing; use `det experiment move` "
                f"first to change the experiment's {what}"
            )
    return override


def _nodes(value: Any, limit: int) -> int:
    """How many values `value` holds, counting shared (aliased) ones each time; stops past `limit`."""
    count, stack = 0, [value]
    while stack and count <= limit:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return count


def _load(s: Session, experiment_id: int) -> models.Experiment:
    exp = s.get(models.Experiment, experiment_id)
    if exp is None or exp.state in (S.DELETING, S.DELETED):
        raise NotFound(f"experiment {experiment_id} not found")
    return exp


def _trials(s: Session, experiment_id: int) -> list[models.Trial]:
    return list(
        s.scalars(
            select(models.Trial).where(models.Trial.experiment_id == experiment_id).order_by(models.Trial.id)
        )
    )


def _check_managed(exp: models.Experiment) -> None:
    if exp.unmanaged:
        raise FailedPrecondition(
            f"experiment {exp.id} is unmanaged: it is continued by running its code again with the "
            "same external_experiment_id and external_trial_id, not by the master"
        )


def _check_state(exp: models.Experiment) -> None:
    if exp.state not in TERMINAL:
        raise FailedPrecondition(
            f"experiment {exp.id} is {exp.state}: only an experiment that has ended (COMPLETED, CANCELED "
            "or ERROR) can be continued; try again once it has ended"
        )


def _check_other_searcher(
    exp: models.Experiment, name: str, override: dict[str, Any], trials: list[models.Trial]
) -> None:
    """A search other than single: only grid and random continue, without an override, and only
    with something to retry (Determined's errContinueHPSearchCompleted)."""
    if name not in CONTINUABLE_SEARCHERS:
        raise InvalidArgument(
            f"searcher.name: only single, grid and random searches can be continued; experiment {exp.id} "
            f"uses '{name}'"
        )
    if override:
        raise InvalidArgument(
            f"override_config: only a single-searcher experiment takes an override config; experiment "
            f"{exp.id} uses '{name}'"
        )
    _check_state(exp)
    if exp.state == S.COMPLETED and all(t.state == S.COMPLETED for t in trials):
        raise FailedPrecondition(
            f"experiment {exp.id} has been completed, with every trial completed: its search cannot be "
            "continued"
        )


def _at(config: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = config
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _without(config: dict[str, Any], paths: tuple[tuple[str, ...], ...]) -> dict[str, Any]:
    """A shallow-per-level copy of `config` without the fields at `paths`."""
    result = dict(config)
    for path in paths:
        parent: Any = result
        for key in path[:-1]:
            child = parent.get(key) if isinstance(parent, dict) else None
            if not isinstance(child, dict):
                parent = None
                break
            parent[key] = child = dict(child)
            parent = child
        if isinstance(parent, dict):
            parent.pop(path[-1], None)
    return result


def owner_only_changes(active: dict[str, Any], merged: dict[str, Any]) -> list[str]:
    """The top-level fields `merged` changes beyond NON_OWNER_FIELDS: what only the owner may change."""
    a, m = _without(active, NON_OWNER_FIELDS), _without(merged, NON_OWNER_FIELDS)
    return sorted(key for key in set(a) | set(m) if a.get(key) != m.get(key))


def merged_config(ctx: MasterContext, exp: models.Experiment, override: dict[str, Any]) -> dict[str, Any]:
    """The experiment's config with `override` merged in and every default filled; InvalidArgument
    naming the field when the result is not a valid config or changes what may not change."""
    active = exp.config
    view = config_view(active)
    try:
        merged = expand_config(
            merge_template(override, active),
            ConfigDefaults(
                checkpoint_storage=default_storage(ctx),
                resource_pool=ctx.settings.default_pool,
                experiment_seed=view.experiment_seed,
            ),
        )
    except ConfigError as exc:
        raise InvalidArgument(f"invalid experiment config: {exc}") from None
    name = _at(merged, ("searcher", "name"))
    if name != "single":
        raise InvalidArgument(
            f"searcher.name: must stay 'single' when continuing (the override gives '{name}')"
        )
    if merged.get("hyperparameters") != active.get("hyperparameters"):
        raise InvalidArgument(
            "hyperparameters: cannot change when continuing: the trial keeps the hyperparameters it was "
            "created with (fork the experiment to try others)"
        )
    if _at(merged, ("reproducibility", "experiment_seed")) != view.experiment_seed:
        raise InvalidArgument(
            "reproducibility.experiment_seed: cannot change when continuing: the search is resumed with "
            "the seed it was created with"
        )
    storage_paths = tuple(("checkpoint_storage", key) for key in STORAGE_POLICY_FIELDS)
    if _without(merged, storage_paths).get("checkpoint_storage") != _without(active, storage_paths).get(
        "checkpoint_storage"
    ):
        raise InvalidArgument(
            "checkpoint_storage: only save_experiment_best, save_trial_best and save_trial_latest can "
            "change when continuing: the trial resumes from its checkpoint where it is stored"
        )
    merged_view = config_view(merged)
    pools = [p.name for p in ctx.settings.pools]
    if merged_view.resource_pool not in pools:
        raise InvalidArgument(
            f"resources.resource_pool: no resource pool '{merged_view.resource_pool}' "
            f"(pools: {', '.join(pools)})"
        )
    with ctx.db.read() as s:
        project = s.get_one(models.Project, exp.project_id)
        pool_bindings.check_available(
            s, merged_view.resource_pool, project.workspace_id, "resources.resource_pool"
        )
    if len(merged_view.name) > experiment_edits.MAX_NAME_CHARS:
        raise InvalidArgument(f"name: at most {experiment_edits.MAX_NAME_CHARS} characters")
    experiment_edits.checked_labels(merged.get("labels") or [])
    return merged


def _plan(ctx: MasterContext, principal: Principal, experiment_id: int, override: dict[str, Any]) -> _Plan:
    with ctx.db.read() as s:
        exp = _load(s, experiment_id)
        experiment_lifecycle.check_can_modify(s, principal, exp)
        _check_managed(exp)
        if exp.archived:
            raise FailedPrecondition(f"experiment {exp.id} is archived: unarchive it before continuing it")
        trials = _trials(s, exp.id)
        name = config_view(exp.config).searcher_name
        single = name == "single"
        if not single:
            _check_other_searcher(exp, name, override, trials)
        config = merged_config(ctx, exp, override) if single else exp.config
        # The merged config reaches the hosts as a new experiment's would: the same policy holds.
        check_config_policy(ctx.settings, principal, config)
        owner = s.get_one(models.User, exp.owner_id)
        if principal.user_id != exp.owner_id:
            changed = owner_only_changes(exp.config, config)
            if changed:
                allowed = ", ".join(".".join(path) for path in NON_OWNER_FIELDS)
                raise PermissionDenied(
                    f"experiment {exp.id} runs as its owner '{owner.username}', so only they may change "
                    f"{', '.join(changed)} when continuing it; anyone else may change only {allowed}. "
                    "To run a changed copy as yourself, fork the experiment"
                )
        if not owner.active:
            raise FailedPrecondition(
                f"experiment {exp.id} belongs to user '{owner.username}', who is deactivated; its trial "
                "runs as its owner, so reactivate the user to continue it"
            )
        _check_state(exp)
        # The single searcher's trial is reopened here; a grid or random search's, when asked again.
        trial = trials[0] if trials and single else None
        return _Plan(
            config=config,
            state=exp.state,
            config_version=exp.config_version or 0,
            single=single,
            trial_id=trial.id if trial else None,
            request_id=trial.request_id if trial else None,
        )


def _check_answer(experiment_id: int, plan: _Plan, response: spb.SearcherResponse) -> None:
    """The new session must ask for the trial the experiment has (same request id), and nothing else."""
    if not plan.single or plan.request_id is None:
        return
    creates = [a.create.request_id for a in response.actions if a.WhichOneof("action") == "create"]
    if creates != [plan.request_id]:
        raise FailedPrecondition(
            f"experiment {experiment_id}: its search, started again, does not ask for trial "
            f"{plan.trial_id} (request id {plan.request_id}); it cannot be continued in place"
        )


def _reopen(
    ctx: MasterContext, experiment_id: int, plan: _Plan, session_id: str, response: spb.SearcherResponse
) -> None:
    """The writes of a continue, in one unit of work, if the experiment is still as planned."""
    with ctx.unit_of_work() as w:
        exp = experiment_lifecycle.load(w, experiment_id)
        if exp.state != plan.state or (exp.config_version or 0) != plan.config_version:
            raise FailedPrecondition(f"experiment {exp.id} changed while it was being continued; try again")
        config = plan.config
        view = config_view(config)
        experiment_edits.replace_config(exp, config)
        exp.name = view.name or exp.name
        exp.description = view.description
        exp.labels = experiment_edits.checked_labels(config.get("labels") or []) or []
        exp.resource_pool = view.resource_pool
        exp.searcher_session_id = session_id
        exp.checkpoint_gc_done = False  # it will end again; collect then under its policy
        # Left over only if the last end was cut short: the old session's events have no reader.
        searcher_outbox.forget(w, exp.id)
        search_snapshots.forget_snapshot(w, exp.id)
        experiment_lifecycle.transition(ctx, w, exp, S.ACTIVE, "continued by a user", continuing=True)
        # As Determined: the restarts of earlier runs no longer count against max_restarts.
        w.session.execute(update(models.Trial).where(models.Trial.experiment_id == exp.id).values(restarts=0))
        trial = w.session.get(models.Trial, plan.trial_id) if plan.trial_id is not None else None
        if trial is not None:
            trial.restarts = 0
            trial.search_session_id = session_id  # reopened here, not again when the search asks
            trial.searcher_stopped = False
            trial.early_exit_reason = None
            trial_lifecycle.transition(ctx, w, trial, S.ACTIVE, "experiment continued", continuing=True)
        # Stores the new session's snapshot. Its creates name the trials that exist: the single
        # searcher's, reopened above, is taken as already applied; a grid or random search's are
        # retried or kept (search_retries.py); no second trial is made for any.
        apply_response(ctx, w, exp, response)
        if trial is not None:
            created = spb.SearcherEvent(trial_created=spb.TrialCreated(request_id=trial.request_id))
            searcher_outbox.enqueue(ctx, w, exp.id, created)
            trial_lifecycle.ensure_running(ctx, w, trial, exp)


def continue_experiment(
    ctx: MasterContext, principal: Principal, experiment_id: int, override_text: str
) -> None:
    """Continue experiment `experiment_id` with the override config in `override_text`."""
    if principal.user_id is None:
        raise PermissionDenied("only a user can continue an experiment")
    override = parse_override(override_text)
    plan = _plan(ctx, principal, experiment_id, override)
    session_id = uuid.uuid4().hex
    try:
        searcher = ctx.searchers.for_config(plan.config)
        response = searcher.start(session_id, search_spec(plan.config))
    except InvalidArgument as exc:
        raise InvalidArgument(f"invalid experiment config: {exc}") from None
    try:
        _check_answer(experiment_id, plan, response)
        _reopen(ctx, experiment_id, plan, session_id, response)
    except BaseException:
        # Nothing was stored: the new session must not linger in the searcher.
        experiment_lifecycle.close_search_session(ctx, session_id, plan.config)
        raise
    log.info(
        "experiment continued",
        experiment_id=experiment_id,
        user=principal.username,
        trial_id=plan.trial_id,
        max_length=config_view(plan.config).training_length,
    )

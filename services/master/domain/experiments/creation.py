"""Creating an experiment: validate the configuration, store the model definition, open the search
session and apply its first answer — all or nothing."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from google.protobuf import struct_pb2
from sqlalchemy import bindparam, func, select

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
from services.master.domain.config.bounds import check_json_value
from services.master.domain.config.policies import check_config_policy
from services.master.domain.config.template_merge import merge_template
from services.master.domain.experiments import experiment_projects, templates, warm_start
from services.master.domain.experiments.experiments import close_search_session
from services.master.domain.experiments.input_limits import check_experiment_limits
from services.master.domain.experiments.searcher_actions import apply_response_in_part
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.kernel.states import RunState
from services.master.domain.scheduling.scheduling import never_fits
from services.master.domain.task_kinds import model_definition
from services.master.domain.workspaces import pool_bindings
from services.master.store import models

log = get_logger(__name__)


@dataclass(frozen=True)
class CreateRequest:
    config_text: str
    files: list[model_definition.ContextFile]
    activate: bool
    validate_only: bool
    parent_id: int | None = None
    # The name of a config template to merge the config over (Determined's --template).
    template: str | None = None
    # The project to create it in (Determined's --project_id); 0: the config's workspace and
    # project keys decide, else the "Uncategorized" project.
    project_id: int = 0


@dataclass(frozen=True)
class Created:
    experiment_id: int | None
    config: dict[str, Any]
    slots_exceeded: bool


def default_storage(ctx: MasterContext) -> dict[str, Any]:
    return {
        "type": "shared_fs",
        "host_path": str(ctx.settings.checkpoint_dir),
        "save_experiment_best": 0,
        "save_trial_best": 1,
        "save_trial_latest": 1,
    }


def expanded_config(
    ctx: MasterContext,
    text: str,
    template: dict[str, Any] | None = None,
    place: experiment_projects.Placement | None = None,
    *,
    unmanaged: bool = False,
    parsed: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The config in `text`, merged over `template`'s config when given, with every default; the
    workspace of `place` may replace the master's default storage and pool. The parsed config is
    bounded (depth, size, numbers JSON can carry) before it is merged or expanded, and the result
    again, so it can be stored and answered as it is. `parsed`: `text` parsed already (it is not
    changed), so the caller that read its keys first does not parse it twice."""
    try:
        raw = parsed if parsed is not None else parse_config_text(text)
        check_json_value(raw)
        if template is not None:
            raw = merge_template(raw, template)
        expanded = expand_config(
            raw,
            ConfigDefaults(
                checkpoint_storage=(place and place.checkpoint_storage) or default_storage(ctx),
                resource_pool=(place and place.default_compute_pool) or ctx.settings.default_pool,
                experiment_seed=int(time.time()) % (2**31),
            ),
            unmanaged=unmanaged,
        )
        check_json_value(expanded)
        return expanded
    except ConfigError as exc:
        raise InvalidArgument(f"invalid experiment config: {exc}") from None


def search_spec(config: dict[str, Any]) -> spb.SearchSpec:
    searcher = struct_pb2.Struct()
    searcher.update(config["searcher"])
    hyperparameters = struct_pb2.Struct()
    hyperparameters.update(config.get("hyperparameters") or {})
    seed = int((config.get("reproducibility") or {}).get("experiment_seed") or 0)
    return spb.SearchSpec(searcher=searcher, hyperparameters=hyperparameters, seed=seed)


def check_pool(ctx: MasterContext, config: dict[str, Any], place: experiment_projects.Placement) -> str:
    """The config's pool, set in it: one the master has, open to the experiment's workspace (bound
    to it, or to none)."""
    resources = config.setdefault("resources", {})
    pool = resources.get("resource_pool") or ctx.settings.default_pool
    names = [p.name for p in ctx.settings.pools]
    if pool not in names:
        raise InvalidArgument(
            f"invalid experiment config: resources.resource_pool: no resource pool '{pool}' "
            f"(pools: {', '.join(names)})"
        )
    with ctx.db.read() as s:
        pool_bindings.check_available(s, pool, place.workspace_id, "resources.resource_pool")
    resources["resource_pool"] = pool
    return str(pool)


_ENABLED_SLOTS_IN_POOL = (
    select(func.count())
    .select_from(models.AgentSlot)
    .join(models.Agent, models.Agent.id == models.AgentSlot.agent_id)
    .where(models.Agent.resource_pool == bindparam("pool"), models.AgentSlot.enabled.is_(True))
)


def _slots_exceeded(ctx: MasterContext, pool: str, slots_per_trial: int) -> bool:
    with ctx.db.read() as s:
        capacity = s.scalar(_ENABLED_SLOTS_IN_POOL, {"pool": pool})
    return slots_per_trial > int(capacity or 0)


def _model_definition(ctx: MasterContext, request: CreateRequest) -> bytes:
    """The files sent, or for a fork sent without any (the WebUI's Fork, the SDK), the parent's: as
    Determined's master does."""
    if request.files or request.parent_id is None:
        return model_definition.pack(request.files, ctx.settings.max_model_definition_bytes)
    with ctx.db.read() as s:
        parent = s.get(models.Experiment, request.parent_id)
        if parent is None or parent.state in (RunState.DELETING, RunState.DELETED):
            raise InvalidArgument(f"parent_id: no experiment {request.parent_id} to fork")
        found = s.get(models.ModelDefinition, request.parent_id)
        return bytes(found.archive) if found is not None else model_definition.pack([], 0)


def store_experiment(w: Work, exp: models.Experiment, archive: bytes) -> None:
    """A new experiment and its model definition, stored (its id set), in a project that still
    takes experiments (it may have been archived or deleted since the experiment was placed)."""
    experiment_projects.check_still_takes_experiments(w, exp.project_id)
    w.session.add(exp)
    w.session.flush()
    w.session.add(
        models.ModelDefinition(
            experiment_id=exp.id,
            archive=archive,
            size=len(archive),
            digest=model_definition.context_digest(archive),
        )
    )


def create(ctx: MasterContext, principal: Principal, request: CreateRequest) -> Created:
    if principal.user_id is None:
        raise InvalidArgument("only a user can create experiments")
    template = None if request.template is None else templates.config_for_experiment(ctx, request.template)
    parsed = experiment_projects.parsed_or_none(request.config_text)
    place = experiment_projects.placement(ctx, request.project_id, parsed, template)
    with ctx.db.read() as s:
        project = s.get_one(models.Project, place.project_id)
        experiment_projects.check_may_create_in(s, principal, project, "project_id")
    config = expanded_config(ctx, request.config_text, template, place, parsed=parsed)
    check_experiment_limits(config, ctx.settings.max_trials_per_experiment)
    check_config_policy(ctx.settings, principal, config)
    pool = check_pool(ctx, config, place)
    archive = _model_definition(ctx, request)
    slots_per_trial = config_view(config).slots_per_trial
    # More slots than the pool has now (or in a shape its agents cannot give) is accepted with
    # Determined's launch warning: agents may join later, and until then the job waits with the
    # scheduler's reason (`det job list`, the WebUI).
    slots_exceeded = (
        _slots_exceeded(ctx, pool, slots_per_trial) or never_fits(ctx, pool, slots_per_trial) is not None
    )
    with ctx.db.read() as s:
        warm_start_uuid = warm_start.source_checkpoint(s, config)
    if request.validate_only:
        return Created(experiment_id=None, config=config, slots_exceeded=slots_exceeded)

    session_id = uuid.uuid4().hex
    try:
        searcher = ctx.searchers.for_config(config)
    except InvalidArgument as exc:
        raise InvalidArgument(f"invalid experiment config: {exc}") from None
    try:
        response = searcher.start(session_id, search_spec(config))
    except InvalidArgument as exc:
        raise InvalidArgument(f"invalid experiment config: {exc}") from None
    try:
        with ctx.unit_of_work() as w:
            now = utcnow()
            exp = models.Experiment(
                name=str(config.get("name") or f"experiment-{session_id[:8]}"),
                description=str(config.get("description") or ""),
                labels=list(config.get("labels") or []),
                state=RunState.ACTIVE if request.activate else RunState.PAUSED,
                archived=False,
                config=config,
                original_config=request.config_text,
                owner_id=principal.user_id,
                start_time=now,
                progress=0.0,
                resource_pool=pool,
                searcher_session_id=session_id,
                warm_start_checkpoint_uuid=warm_start_uuid,
                model_definition_size=len(archive),
                notes="",
                parent_id=request.parent_id,
                project_id=place.project_id,
            )
            store_experiment(w, exp, archive)
            apply_response_in_part(ctx, w, exp, response)
            experiment_id = exp.id
    except BaseException:
        # Nothing was stored: the session must not linger in the searcher either.
        close_search_session(ctx, session_id, config)
        raise
    log.info("experiment created", experiment_id=experiment_id, user=principal.username, pool=pool)
    return Created(experiment_id=experiment_id, config=config, slots_exceeded=slots_exceeded)

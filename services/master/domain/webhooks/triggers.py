"""What fires webhooks, each written to the outbox in the transaction of its cause:

- an experiment reaching a state (EXPERIMENT_STATE_CHANGE, its condition's state), from
  `experiments.transition`;
- a task's log line matching a pattern (TASK_LOG, its condition's regex), from the log store, once
  per task and trigger however many lines match or are resent;
- trial code's alert (CUSTOM), from Core API `context.alert`, for the webhooks the experiment's
  config names (`integrations.webhooks.webhook_id` / `webhook_name`).

Which webhooks hear an experiment is Determined's rule (`hears`): none when its config says
`exclude: true`; a webhook of a workspace hears only that workspace's experiments; a SPECIFIC one
only experiments whose config names it; a global WORKSPACE one hears every experiment."""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from services.common.principal import Principal
from services.master.domain.identity import access, allocation_access
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.errors import NotFound
from services.master.domain.webhooks import outbox, payloads, registry
from services.master.domain.webhooks.payloads import AlertData, ExperimentFacts, TaskLogFacts
from services.master.domain.webhooks.registry import (
    CUSTOM,
    EXPERIMENT_STATE_CHANGE,
    REGEX_KEY,
    SPECIFIC,
    STATE_KEY,
    TASK_LOG,
    WebhookRow,
)
from services.master.store import models

# A log line is matched on its first characters only: patterns run on every line a task prints.
MAX_MATCHED_CHARS = 8192
# An alert's title and description are cut to this many characters each.
MAX_ALERT_CHARS = 4096


@dataclass(frozen=True)
class WebhooksConfig:
    """An experiment's `integrations.webhooks` (Determined's WebhooksConfigV0)."""

    webhook_ids: frozenset[int] = frozenset()
    webhook_names: frozenset[str] = frozenset()
    exclude: bool = False


def webhooks_config(config: Mapping[str, Any] | None) -> WebhooksConfig | None:
    """The config's `integrations.webhooks`, None when it has none."""
    integrations = (config or {}).get("integrations")
    block = integrations.get("webhooks") if isinstance(integrations, Mapping) else None
    if not isinstance(block, Mapping):
        return None
    ids = block.get("webhook_id") or []
    names = block.get("webhook_name") or []
    return WebhooksConfig(
        webhook_ids=frozenset(i for i in ids if isinstance(i, int)) if isinstance(ids, list) else frozenset(),
        webhook_names=frozenset(n for n in names if isinstance(n, str))
        if isinstance(names, list)
        else frozenset(),
        exclude=block.get("exclude") is True,
    )


def hears(
    webhook: WebhookRow, config: WebhooksConfig | None, workspace_id: int | None, is_experiment: bool
) -> bool:
    if config is not None and config.exclude:
        return False
    if webhook.workspace_id is not None and webhook.workspace_id != workspace_id:
        return False
    if webhook.mode == SPECIFIC:
        if not is_experiment or config is None:
            return False
        return webhook.id in config.webhook_ids or webhook.name in config.webhook_names
    return True


def experiment_facts(s: Session, exp: models.Experiment) -> ExperimentFacts:
    project = s.get(models.Project, exp.project_id)
    workspace = s.get(models.Workspace, project.workspace_id) if project is not None else None
    resources = (exp.config or {}).get("resources") or {}
    slots = resources.get("slots_per_trial", 1) if isinstance(resources, Mapping) else 1
    return ExperimentFacts(
        id=exp.id,
        state=str(exp.state),
        name=exp.name,
        start_time=exp.start_time,
        end_time=exp.end_time,
        resource_pool=exp.resource_pool,
        slots_per_trial=slots if isinstance(slots, int) else 1,
        workspace=workspace.name if workspace is not None else "",
        workspace_id=workspace.id if workspace is not None else 0,
        project=project.name if project is not None else "",
        project_id=project.id if project is not None else 0,
    )


# Built once: every state change that may fire a webhook asks it.
_WEBHOOKS_WITH = (
    select(models.WebhookTrigger.webhook_id)
    .where(models.WebhookTrigger.trigger_type == bindparam("trigger_type"))
    .distinct()
)


def _webhooks_with(s: Session, trigger_type: str) -> list[tuple[WebhookRow, registry.TriggerRow]]:
    webhook_ids = list(s.scalars(_WEBHOOKS_WITH, {"trigger_type": trigger_type}))
    if not webhook_ids:
        return []
    return [
        (webhook, trigger)
        for webhook in registry.rows(s, webhook_ids)
        for trigger in webhook.triggers
        if trigger.trigger_type == trigger_type
    ]


def experiment_state_changed(ctx: MasterContext, w: Work, exp: models.Experiment) -> None:
    """Owe a post to every webhook whose state trigger names the experiment's new state."""
    fired = [
        (webhook, trigger)
        for webhook, trigger in _webhooks_with(w.session, EXPERIMENT_STATE_CHANGE)
        if trigger.condition.get(STATE_KEY) == str(exp.state)
    ]
    if not fired:
        return
    facts = experiment_facts(w.session, exp)
    config = webhooks_config(exp.config)
    now = utcnow()
    for webhook, _trigger in fired:
        if hears(webhook, config, facts.workspace_id, is_experiment=True):
            body = payloads.experiment_event(webhook.webhook_type, facts, now, ctx.settings.webhook_base_url)
            outbox.enqueue(ctx, w, webhook.url, body)


def custom_alert(
    ctx: MasterContext,
    w: Work,
    principal: Principal,
    experiment_id: int,
    trial_id: int | None,
    alert: AlertData,
) -> int:
    """Trial code's alert: a post to each CUSTOM trigger of the webhooks the experiment's config
    names. How many were owed."""
    s = w.session
    allocation_access.check_experiment(s, principal, experiment_id)
    if trial_id:
        allocation_access.check_trial(s, principal, trial_id, field="trialId")
    exp = s.get(models.Experiment, experiment_id)
    if exp is None:
        raise NotFound(f"experimentId: no experiment {experiment_id}")
    if not allocation_access.is_trial_code(principal):
        # A user's alert (an unmanaged run's code): about what they may change.
        access.check_experiment(s, principal, exp, Permission.UPDATE_EXPERIMENT)
    if trial_id:
        trial = s.get(models.Trial, trial_id)
        if trial is None or trial.experiment_id != experiment_id:
            raise NotFound(f"trialId: experiment {experiment_id} has no trial {trial_id}")
    config = webhooks_config(exp.config)
    if config is None or config.exclude:
        return 0
    facts = experiment_facts(s, exp)
    named = [
        webhook
        for webhook, _trigger in _webhooks_with(s, CUSTOM)
        if webhook.id in config.webhook_ids
        # By name: the experiment's workspace's webhooks, or global ones (as `hears` has it).
        or (webhook.name in config.webhook_names and webhook.workspace_id in (None, facts.workspace_id))
    ]
    now = utcnow()
    owed = 0
    for webhook in {w_.id: w_ for w_ in named}.values():
        for trigger in webhook.triggers:
            if trigger.trigger_type != CUSTOM:
                continue
            body = payloads.experiment_event(
                webhook.webhook_type,
                facts,
                now,
                ctx.settings.webhook_base_url,
                alert=alert,
                trial_id=trial_id,
            )
            outbox.enqueue(ctx, w, webhook.url, body)
            owed += 1
    return owed


@dataclass(frozen=True)
class _Pattern:
    webhook: WebhookRow
    trigger_id: int
    regex: str
    compiled: re.Pattern[str]


@dataclass(frozen=True)
class LogLine:
    task_id: str
    trial_id: int | None
    agent_id: str
    message: str


class TaskLogMatcher:
    """Matches stored log lines against the TASK_LOG triggers. The compiled patterns are kept in
    memory and rebuilt after any webhook change (registry.generation); with no such trigger a
    batch costs one comparison."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generation = -1
        self._patterns: tuple[_Pattern, ...] = ()

    def _current(self, s: Session) -> tuple[_Pattern, ...]:
        with self._lock:
            generation = registry.generation()
            if generation != self._generation:
                patterns = []
                for webhook, trigger in _webhooks_with(s, TASK_LOG):
                    regex = trigger.condition.get(REGEX_KEY)
                    if isinstance(regex, str):
                        patterns.append(_Pattern(webhook, trigger.id, regex, re.compile(regex)))
                self._patterns = tuple(patterns)
                self._generation = generation
            return self._patterns

    def scan(self, ctx: MasterContext, s: Session, lines: Sequence[LogLine]) -> int:
        """Owe, in transaction `s`, a post for each trigger a task's line matches for the first
        time. How many were owed (the caller wakes the sender after its commit)."""
        patterns = self._current(s)
        if not patterns or not lines:
            return 0
        owed = 0
        scopes: dict[str, tuple[WebhooksConfig | None, int | None, tuple[int, int] | None, str]] = {}
        now: datetime | None = None
        for line in lines:
            text = line.message[:MAX_MATCHED_CHARS]
            for pattern in patterns:
                if pattern.compiled.search(text) is None:
                    continue
                if line.task_id not in scopes:
                    scopes[line.task_id] = _task_scope(s, line.task_id, line.trial_id)
                config, workspace_id, trial, kind = scopes[line.task_id]
                if not hears(pattern.webhook, config, workspace_id, is_experiment=trial is not None):
                    continue
                if not _first_match(s, line.task_id, pattern.trigger_id):
                    continue
                now = now or utcnow()
                facts = TaskLogFacts(line.task_id, line.agent_id, line.message, trial, kind)
                body = payloads.task_log_event(
                    pattern.webhook.webhook_type, facts, pattern.regex, now, ctx.settings.webhook_base_url
                )
                outbox.add(s, pattern.webhook.url, body)
                owed += 1
        return owed


def _task_scope(
    s: Session, task_id: str, trial_id: int | None
) -> tuple[WebhooksConfig | None, int | None, tuple[int, int] | None, str]:
    """A task's experiment webhooks config, workspace, (experiment, trial) and kind."""
    if trial_id is not None:
        trial = s.get(models.Trial, trial_id)
        exp = s.get(models.Experiment, trial.experiment_id) if trial is not None else None
        if exp is not None:
            project = s.get(models.Project, exp.project_id)
            workspace_id = project.workspace_id if project is not None else None
            return webhooks_config(exp.config), workspace_id, (exp.id, trial_id), "TRIAL"
    task = s.get(models.Task, task_id)
    if task is None:
        return None, None, None, ""
    return None, task.workspace_id, None, str(task.kind).upper()


def _first_match(s: Session, task_id: str, trigger_id: int) -> bool:
    """Record that the trigger fired for the task; False when it had already."""
    dialect = s.get_bind().dialect.name
    insert = pg_insert if dialect == "postgresql" else sqlite_insert
    try:
        # In a savepoint: a trigger deleted since the patterns were read fails this insert alone,
        # never the log lines stored beside it.
        with s.begin_nested():
            result = s.execute(
                insert(models.WebhookTaskLogMatch)
                .values(task_id=task_id, trigger_id=trigger_id)
                .on_conflict_do_nothing()
            )
    except IntegrityError:
        return False
    return bool(result.rowcount)  # type: ignore[attr-defined]

"""Webhooks and their triggers: created, listed, edited (the URL, as Determined allows), deleted.
Who may, as Determined's basic access rule has it: an admin manages global webhooks (of no
workspace); a workspace's owner (or an admin) manages its webhooks; everyone sees the global ones
and those of the workspaces they may manage. Every field is checked, and named, before anything is
stored."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import delete as sql_delete
from sqlalchemy import select
from sqlalchemy.orm import Session

from services.common.principal import Principal
from services.master.domain.identity import access
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import Work
from services.master.domain.kernel.errors import InvalidArgument, NotFound, PermissionDenied
from services.master.domain.kernel.states import RunState
from services.master.domain.workspaces.workspaces import check_can_manage_workspace
from services.master.store import models

# Payload shapes, trigger types and modes, by Determined's names (its enums without the prefix).
DEFAULT = "DEFAULT"
SLACK = "SLACK"
WEBHOOK_TYPES = (DEFAULT, SLACK)

EXPERIMENT_STATE_CHANGE = "EXPERIMENT_STATE_CHANGE"
METRIC_THRESHOLD_EXCEEDED = "METRIC_THRESHOLD_EXCEEDED"  # stored, never fired (as Determined)
TASK_LOG = "TASK_LOG"
CUSTOM = "CUSTOM"
TRIGGER_TYPES = (EXPERIMENT_STATE_CHANGE, METRIC_THRESHOLD_EXCEEDED, TASK_LOG, CUSTOM)

WORKSPACE = "WORKSPACE"
SPECIFIC = "SPECIFIC"
MODES = (WORKSPACE, SPECIFIC)

REGEX_KEY = "regex"
STATE_KEY = "state"

MAX_NAME_CHARS = 255
MAX_URL_CHARS = 2048
MAX_TRIGGERS = 20
MAX_REGEX_CHARS = 1024
MAX_CONDITION_BYTES = 4096
# The states an experiment can reach (and be reported in).
EXPERIMENT_STATES = tuple(s.value for s in RunState if not s.value.startswith("DELET"))


@dataclass(frozen=True)
class TriggerSpec:
    trigger_type: str
    condition: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class WebhookSpec:
    """A webhook as a caller asks for it; `workspace_id` None: a global webhook."""

    name: str
    url: str
    webhook_type: str
    mode: str
    workspace_id: int | None
    triggers: tuple[TriggerSpec, ...]


@dataclass(frozen=True)
class TriggerRow:
    id: int
    trigger_type: str
    condition: dict[str, Any]
    webhook_id: int


@dataclass(frozen=True)
class WebhookRow:
    id: int
    name: str
    url: str
    webhook_type: str
    mode: str
    workspace_id: int | None
    triggers: tuple[TriggerRow, ...]


def checked_url(url: str, field: str = "webhook.url") -> str:
    """An absolute http(s) URL with a host, bounded."""
    url = url.strip()
    if not url:
        raise InvalidArgument(f"{field}: required (the receiver's http or https URL)")
    if len(url) > MAX_URL_CHARS:
        raise InvalidArgument(f"{field}: at most {MAX_URL_CHARS} characters (got {len(url)})")
    if any(ord(c) < 0x21 for c in url):
        raise InvalidArgument(f"{field}: must not contain spaces or control characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as exc:
        raise InvalidArgument(f"{field}: not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidArgument(f"{field}: must be an http or https URL with a host, got {url!r}")
    return url


def _checked_name(name: str) -> str:
    """Determined accepts an empty name (its own tests create webhooks named ""): such a webhook
    is named by its id in an experiment's config. A name given is bounded and printable."""
    if name and not name.strip():
        raise InvalidArgument("webhook.name: must not be only spaces (leave it empty for no name)")
    if len(name) > MAX_NAME_CHARS:
        raise InvalidArgument(f"webhook.name: at most {MAX_NAME_CHARS} characters (got {len(name)})")
    if any(ord(c) < 0x20 for c in name):
        raise InvalidArgument("webhook.name: must not contain control characters")
    return name.strip()


def _checked_condition(trigger: TriggerSpec, mode: str, where: str) -> dict[str, Any]:
    condition = dict(trigger.condition)
    if len(json.dumps(condition)) > MAX_CONDITION_BYTES:
        raise InvalidArgument(f"{where}.condition: at most {MAX_CONDITION_BYTES} bytes of JSON")
    if trigger.trigger_type == EXPERIMENT_STATE_CHANGE:
        state = condition.get(STATE_KEY)
        if set(condition) != {STATE_KEY} or state not in EXPERIMENT_STATES:
            raise InvalidArgument(
                f'{where}.condition: must be {{"state": S}} with S one of {", ".join(EXPERIMENT_STATES)}'
                f", got {condition}"
            )
    elif trigger.trigger_type == TASK_LOG:
        regex = condition.get(REGEX_KEY)
        if set(condition) != {REGEX_KEY} or not isinstance(regex, str) or not regex:
            raise InvalidArgument(
                f'{where}.condition: a task log trigger\'s condition is {{"regex": "..."}}, got {condition}'
            )
        if len(regex) > MAX_REGEX_CHARS:
            raise InvalidArgument(f"{where}.condition.regex: at most {MAX_REGEX_CHARS} characters")
        try:
            re.compile(regex)
        except re.error as exc:
            raise InvalidArgument(f"{where}.condition.regex: does not compile ({exc})") from None
    elif trigger.trigger_type == CUSTOM and mode != SPECIFIC:
        raise InvalidArgument(
            f"{where}.triggerType: a CUSTOM trigger works only on a webhook of mode SPECIFIC "
            f"(webhook.mode is {mode})"
        )
    return condition


def check_spec(spec: WebhookSpec) -> WebhookSpec:
    """The spec with its name and URL trimmed, or InvalidArgument naming the first bad field."""
    name = _checked_name(spec.name)
    url = checked_url(spec.url)
    if spec.webhook_type not in WEBHOOK_TYPES:
        raise InvalidArgument(
            "webhook.webhookType: must be WEBHOOK_TYPE_DEFAULT or WEBHOOK_TYPE_SLACK, "
            f"got {spec.webhook_type!r}"
        )
    if spec.mode not in MODES:
        raise InvalidArgument(
            f"webhook.mode: must be WEBHOOK_MODE_WORKSPACE or WEBHOOK_MODE_SPECIFIC, got {spec.mode!r}"
        )
    if not spec.triggers:
        raise InvalidArgument("webhook.triggers: at least one trigger required")
    if len(spec.triggers) > MAX_TRIGGERS:
        raise InvalidArgument(f"webhook.triggers: at most {MAX_TRIGGERS} (got {len(spec.triggers)})")
    triggers = []
    for i, trigger in enumerate(spec.triggers):
        where = f"webhook.triggers[{i}]"
        if trigger.trigger_type not in TRIGGER_TYPES:
            raise InvalidArgument(
                f"{where}.triggerType: must be one of "
                f"{', '.join('TRIGGER_TYPE_' + t for t in TRIGGER_TYPES)}, got {trigger.trigger_type!r}"
            )
        triggers.append(TriggerSpec(trigger.trigger_type, _checked_condition(trigger, spec.mode, where)))
    return WebhookSpec(name, url, spec.webhook_type, spec.mode, spec.workspace_id, tuple(triggers))


def _row(webhook: models.Webhook, triggers: list[models.WebhookTrigger]) -> WebhookRow:
    return WebhookRow(
        id=webhook.id,
        name=webhook.name,
        url=webhook.url,
        webhook_type=webhook.webhook_type,
        mode=webhook.mode,
        workspace_id=webhook.workspace_id,
        triggers=tuple(
            TriggerRow(t.id, t.trigger_type, dict(t.condition), t.webhook_id)
            for t in sorted(triggers, key=lambda t: t.id)
        ),
    )


def rows(s: Session, webhook_ids: list[int] | None = None) -> list[WebhookRow]:
    """Webhooks with their triggers, by id (all of them when `webhook_ids` is None)."""
    query = select(models.Webhook).order_by(models.Webhook.id)
    if webhook_ids is not None:
        query = query.where(models.Webhook.id.in_(webhook_ids))
    webhooks = s.scalars(query).all()
    if not webhooks:
        return []
    by_webhook: dict[int, list[models.WebhookTrigger]] = {w.id: [] for w in webhooks}
    for trigger in s.scalars(
        select(models.WebhookTrigger).where(models.WebhookTrigger.webhook_id.in_(list(by_webhook)))
    ):
        by_webhook[trigger.webhook_id].append(trigger)
    return [_row(w, by_webhook[w.id]) for w in webhooks]


def check_may_manage(s: Session, principal: Principal, workspace_id: int | None, verb: str) -> None:
    """A global webhook is an admin's (EDIT_WEBHOOKS with CHANGE_OTHERS cluster-wide: it is
    nobody's own); a workspace's webhooks are its owner's, or of who holds EDIT_WEBHOOKS and
    CHANGE_OTHERS there (its WorkspaceAdmins): their URLs are the workspace's secrets."""
    if workspace_id is None:
        if not access.may_change(principal, Permission.EDIT_WEBHOOKS, None, [], s):
            raise PermissionDenied(f"only an admin may {verb} global webhooks (of no workspace)")
        return
    workspace = s.get(models.Workspace, workspace_id)
    if workspace is None:
        raise NotFound(f"webhook.workspaceId: no workspace {workspace_id}")
    check_can_manage_workspace(s, principal, workspace, f"{verb} webhooks of", Permission.EDIT_WEBHOOKS)


def listed(s: Session, principal: Principal) -> list[WebhookRow]:
    """The global webhooks, and those of the workspaces whose webhooks the caller may manage."""
    every = rows(s)
    principal = access.resolved(principal, s)  # its grants computed once, not per row
    owner_rows = s.execute(select(models.Workspace.id, models.Workspace.user_id)).all()
    owners: dict[int, int | None] = dict(owner_rows)
    return [
        row
        for row in every
        if row.workspace_id is None
        or access.may_change(
            principal, Permission.EDIT_WEBHOOKS, row.workspace_id, [owners.get(row.workspace_id)], s
        )
    ]


def get(s: Session, webhook_id: int, field: str = "id") -> WebhookRow:
    found = rows(s, [webhook_id])
    if not found:
        raise NotFound(f"{field}: no webhook {webhook_id}")
    return found[0]


def create(w: Work, principal: Principal, spec: WebhookSpec) -> WebhookRow:
    # The caller first: who may make webhooks there, before what they asked for is looked at.
    check_may_manage(w.session, principal, spec.workspace_id, "create")
    spec = check_spec(spec)
    webhook = models.Webhook(
        name=spec.name,
        url=spec.url,
        webhook_type=spec.webhook_type,
        mode=spec.mode,
        workspace_id=spec.workspace_id,
        created_at=utcnow(),
    )
    w.session.add(webhook)
    w.session.flush()
    for trigger in spec.triggers:
        w.session.add(
            models.WebhookTrigger(
                webhook_id=webhook.id, trigger_type=trigger.trigger_type, condition=trigger.condition
            )
        )
    w.session.flush()
    w.later(_triggers_changed)
    return get(w.session, webhook.id)


def _managed(w: Work, principal: Principal, webhook_id: int, verb: str) -> models.Webhook:
    webhook = w.session.get(models.Webhook, webhook_id)
    if webhook is None:
        raise NotFound(f"id: no webhook {webhook_id}")
    check_may_manage(w.session, principal, webhook.workspace_id, verb)
    return webhook


def patch_url(w: Work, principal: Principal, webhook_id: int, url: str) -> None:
    """Determined edits a webhook's URL only; other changes are a delete and a create."""
    url = checked_url(url)
    _managed(w, principal, webhook_id, "edit").url = url
    w.later(_triggers_changed)


def delete(w: Work, principal: Principal, webhook_id: int) -> None:
    _managed(w, principal, webhook_id, "delete")
    # Its triggers and their task-log matches go with it; events already owed are still sent, as
    # Determined's queue does.
    w.session.execute(
        sql_delete(models.WebhookTrigger)
        .where(models.WebhookTrigger.webhook_id == webhook_id)
        .execution_options(synchronize_session=False)
    )
    w.session.execute(
        sql_delete(models.Webhook)
        .where(models.Webhook.id == webhook_id)
        .execution_options(synchronize_session=False)
    )
    w.later(_triggers_changed)


def check_may_test(s: Session, principal: Principal, webhook_id: int) -> WebhookRow:
    webhook = get(s, webhook_id)
    check_may_manage(s, principal, webhook.workspace_id, "test")
    return webhook


# Bumped after every committed change of webhooks: the task-log matcher rebuilds its compiled
# patterns when it sees a new generation (triggers.TaskLogMatcher).
_generation = [0]


def _triggers_changed() -> None:
    _generation[0] += 1


def generation() -> int:
    return _generation[0]

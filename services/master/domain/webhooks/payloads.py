"""The bodies posted to receivers, as Determined shapes them, and their signature.

DEFAULT webhooks get Determined's event JSON: `event_id`, `event_type`, `timestamp`, the trigger's
`condition` and the `event_data` of its kind; SLACK webhooks get a Slack message of blocks (and an
attachment with the experiment). Bodies are encoded once, compactly (as Go's encoder writes them,
which is also what Determined's docs tell receivers to re-encode before checking a signature), and
stored in the outbox as the exact bytes to send and sign. ASCII only (other characters escaped):
then the check Determined's docs give receivers (`json.dumps(json.loads(body), separators=(",",
":"))`, signed) rebuilds exactly these bytes, emoji of Slack messages included."""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from services.master.domain.webhooks.registry import (
    CUSTOM,
    EXPERIMENT_STATE_CHANGE,
    SLACK,
    TASK_LOG,
)

SIGNATURE_HEADER = "X-Determined-AI-Signature"
TIMESTAMP_HEADER = "X-Determined-AI-Signature-Timestamp"
_COMPLETED_COLOR = "#13B670"
_ERROR_COLOR = "#DD5040"


@dataclass(frozen=True)
class ExperimentFacts:
    """What a payload tells of an experiment (Determined's ExperimentPayload)."""

    id: int
    state: str
    name: str
    start_time: datetime
    end_time: datetime | None
    resource_pool: str
    slots_per_trial: int
    workspace: str
    workspace_id: int
    project: str
    project_id: int


@dataclass(frozen=True)
class AlertData:
    """Trial code's alert (Core API `context.alert`), its level as Determined's task log level."""

    title: str
    description: str
    level: str


@dataclass(frozen=True)
class TaskLogFacts:
    task_id: str
    node_name: str
    triggering_log: str
    # The trial whose task it is (experiment id, trial id), or the task's kind otherwise.
    trial: tuple[int, int] | None
    task_kind: str


def encode(body: dict[str, Any]) -> str:
    return json.dumps(body, separators=(",", ":"))


def sign(key: str, timestamp: int, body: bytes) -> str:
    """Determined's signature: HMAC-SHA256 over "<timestamp>,<body>" with the signing key."""
    return hmac.new(key.encode(), str(timestamp).encode() + b"," + body, hashlib.sha256).hexdigest()


def _event(event_type: str, now: datetime, condition: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
    return {
        "event_id": str(uuid.uuid4()),
        "event_type": event_type,
        "timestamp": int(now.timestamp()),
        "condition": condition,
        "event_data": data,
    }


def _duration_s(exp: ExperimentFacts, now: datetime) -> int:
    end = exp.end_time or now
    return max(0, int((end - exp.start_time).total_seconds()))


def _experiment_json(exp: ExperimentFacts, now: datetime, trial_id: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": exp.id,
        "state": exp.state,
        "name": exp.name,
        "duration": _duration_s(exp, now),
        "resource_pool": exp.resource_pool,
        "slots_per_trial": exp.slots_per_trial,
        "workspace": exp.workspace,
        "project": exp.project,
    }
    if trial_id:
        out["trial_id"] = trial_id
    return out


def experiment_event(
    webhook_type: str,
    exp: ExperimentFacts,
    now: datetime,
    base_url: str,
    *,
    alert: AlertData | None = None,
    trial_id: int | None = None,
) -> str:
    """An experiment's state change (or, with `alert`, trial code's CUSTOM alert)."""
    if webhook_type == SLACK:
        return encode(_experiment_slack(exp, now, base_url, alert, trial_id))
    data: dict[str, Any] = {"experiment": _experiment_json(exp, now, trial_id)}
    if alert is not None:
        data["custom_data"] = {"title": alert.title, "description": alert.description, "level": alert.level}
    event_type = CUSTOM if alert is not None else EXPERIMENT_STATE_CHANGE
    return encode(_event(event_type, now, {"state": exp.state}, data))


def _field(text: str) -> dict[str, str]:
    return {"type": "mrkdwn", "text": text}


def _experiment_slack(
    exp: ExperimentFacts, now: datetime, base_url: str, alert: AlertData | None, trial_id: int | None
) -> dict[str, Any]:
    label = f"{exp.name} (#{exp.id})"
    link = f"<{base_url}/det/experiments/{exp.id}/overview | {label}>" if base_url else label
    color = _COMPLETED_COLOR
    if exp.state == "COMPLETED":
        status, headline, shown = "Your experiment completed successfully 🎉", f"✅ {link}", "Completed"
    elif exp.state == "ERROR":
        status, headline, shown = "Your experiment has stopped with errors", f"❌ {link}", "Errored"
        color = _ERROR_COLOR
    else:
        status, headline, shown = f"The status of your experiment is {exp.state}", link, exp.state
    hours_f = _duration_s(exp, now) / 3600
    whole_hours = math.floor(hours_f)
    minutes = int((hours_f - whole_hours) * 60)
    fields = [_field(f"*Status*: {shown}"), _field(f"*Duration*: {whole_hours}h {minutes}min")]
    if exp.workspace:
        fields.append(
            _field(
                f"*Workspace*: <{base_url}/det/workspaces/{exp.workspace_id}/projects | {exp.workspace}>"
                if base_url
                else f"*Workspace*: {exp.workspace}"
            )
        )
    if exp.project:
        fields.append(
            _field(
                f"*Project*: <{base_url}/det/projects/{exp.project_id} | {exp.project}>"
                if base_url
                else f"*Project*: {exp.project}"
            )
        )
    if trial_id:
        fields.append(_field(f"*Trial ID*: {trial_id}"))
    message: dict[str, Any] = {"type": "section", "text": {"type": "plain_text", "text": status}}
    if alert is not None:
        message = {
            "type": "section",
            "text": {"type": "plain_text", "text": "Event Data"},
            "fields": [
                _field(f"*Level*: {alert.level}"),
                _field(f"*Title*: {alert.title}"),
                _field(f"*Description*: {alert.description}"),
            ],
        }
    experiment_block = {"type": "section", "text": _field(headline), "fields": fields}
    return {"blocks": [message], "attachments": [{"color": color, "blocks": [experiment_block]}]}


def task_log_event(webhook_type: str, facts: TaskLogFacts, regex: str, now: datetime, base_url: str) -> str:
    """A task's log line matched a TASK_LOG trigger's regex."""
    if webhook_type != SLACK:
        data = {
            "task_log": {
                "task_id": facts.task_id,
                "node_name": facts.node_name,
                "triggering_log": facts.triggering_log,
            }
        }
        return encode(_event(TASK_LOG, now, {"regex": regex}, data))
    quoted = f"```{facts.triggering_log}```\nThis log matched the regex\n```{regex}```\n"
    if facts.trial is not None:
        experiment_id, trial_id = facts.trial
        text = (
            f"Experiment ID `{experiment_id}`, Trial ID `{trial_id}`, running on node "
            f"`{facts.node_name}`, reported a log\n" + quoted
        )
        path = f"/det/experiments/{experiment_id}/trials/{trial_id}/logs"
        text += f"<{base_url}{path} | View full logs here>" if base_url else f"View full logs at {path}"
    else:
        text = (
            f"Task ID `{facts.task_id}`, task type `{facts.task_kind}`, running on node "
            f"`{facts.node_name}`, reported a log\n" + quoted
        )
    return encode({"blocks": [{"type": "section", "text": _field(text)}]})


def test_event(webhook_type: str, now: datetime) -> str:
    """What `TestWebhook` sends (Determined's mock payload)."""
    if webhook_type == SLACK:
        return encode({"blocks": [{"type": "section", "text": {"type": "plain_text", "text": "test"}}]})
    return encode(_event(EXPERIMENT_STATE_CHANGE, now, {"state": "COMPLETED"}, {"data": "test"}))

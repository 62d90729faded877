"""Webhooks with the stock client: created, listed, edited, tested and deleted through Determined's
REST API (its SDK bindings and plain HTTP), bad ones refused naming the field; then a tiny
experiment on a one-agent, one-slot cluster, whose trial raises an alert and prints a line a
pattern matches, reaches receivers this test runs on 127.0.0.1: the state change (after the
receiver first fails, so the master retries), the task-log match and the alert, each signed with
the cluster's signing key."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.e2e.determined_client import det_runner, determined_env, sdk_runner
from tests.e2e.helpers import wait_state
from tests.e2e.test_e2e_rest import TIMEOUT, base_url, rest_login
from tests.support.cluster import TestCluster, running_cluster
from tests.support.webhook_receiver import Receiver

KEY = "e2e-webhook-signing-key"
ALERT_DIR = Path(__file__).parent / "fixtures" / "det_alert"
# Determined's ExperimentPayload (master/internal/webhooks/webhook.go).
EXPERIMENT_KEYS = {
    "id",
    "state",
    "name",
    "duration",
    "resource_pool",
    "slots_per_trial",
    "workspace",
    "project",
}


@pytest.fixture
def small_cluster(db_url: str | None, tmp_path: Path) -> Iterator[TestCluster]:
    """One agent, one slot; webhooks signed with a key the test knows."""
    with running_cluster(
        tmp_path / "cluster", db_url, agents=1, slots=1, extra_env={"CAIRN_WEBHOOKS_SIGNING_KEY": KEY}
    ) as c:
        yield c


@pytest.fixture
def receivers() -> Iterator[tuple[Receiver, Receiver]]:
    flaky, steady = Receiver([500]), Receiver()
    yield flaky, steady
    flaky.close()
    steady.close()


def _post(admin: requests.Session, base: str, body: dict[str, Any]) -> requests.Response:
    return admin.post(f"{base}/api/v1/webhooks", json=body, timeout=TIMEOUT)


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "alert.yaml"
    path.write_text(
        """
name: webhooks-e2e
entrypoint: python3 alert_trial.py
searcher:
  name: single
  metric: x
  max_length:
    batches: 1
max_restarts: 0
integrations:
  webhooks:
    webhook_name:
      - alerts
"""
    )
    return path


def test_webhooks_are_managed_with_the_stock_client_and_delivered_by_the_master(
    small_cluster: TestCluster, tmp_path: Path, receivers: tuple[Receiver, Receiver]
) -> None:
    flaky, steady = receivers
    env = determined_env(small_cluster, tmp_path / "home")
    sdk: Callable[[str], Any] = sdk_runner(env, user="admin")
    base = base_url(small_cluster)
    admin = requests.Session()
    token = rest_login(base, admin, username="admin").json()["token"]
    admin.headers["Authorization"] = f"Bearer {token}"

    # Bad input is refused, naming the field.
    for body, field in (
        (
            {
                "name": "   ",
                "url": steady.url(),
                "webhookType": "WEBHOOK_TYPE_DEFAULT",
                "mode": "WEBHOOK_MODE_WORKSPACE",
                "triggers": [
                    {
                        "triggerType": "TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE",
                        "condition": {"state": "COMPLETED"},
                    }
                ],
            },
            "webhook.name",
        ),
        (
            {
                "name": "x",
                "url": "nope",
                "webhookType": "WEBHOOK_TYPE_DEFAULT",
                "mode": "WEBHOOK_MODE_WORKSPACE",
                "triggers": [
                    {
                        "triggerType": "TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE",
                        "condition": {"state": "COMPLETED"},
                    }
                ],
            },
            "webhook.url",
        ),
        (
            {
                "name": "x",
                "url": steady.url(),
                "webhookType": "WEBHOOK_TYPE_DEFAULT",
                "mode": "WEBHOOK_MODE_WORKSPACE",
                "triggers": [{"triggerType": "TRIGGER_TYPE_TASK_LOG", "condition": {"regex": "(open"}}],
            },
            "webhook.triggers[0].condition.regex",
        ),
    ):
        refused = _post(admin, base, body)
        assert refused.status_code == 400 and field in refused.text, refused.text

    # A task-log webhook over plain REST (every experiment of every workspace).
    created = _post(
        admin,
        base,
        {
            "name": "",  # as Determined's own tests send it
            "url": steady.url("/tasklog"),
            "webhookType": "WEBHOOK_TYPE_DEFAULT",
            "mode": "WEBHOOK_MODE_WORKSPACE",
            "triggers": [
                {"triggerType": "TRIGGER_TYPE_TASK_LOG", "condition": {"regex": r"WEBHOOK-PATTERN-\d+"}}
            ],
        },
    )
    assert created.status_code == 200, created.text
    assert created.json()["webhook"]["triggers"][0]["condition"] == {"regex": r"WEBHOOK-PATTERN-\d+"}

    # The state-change and the alert webhooks with the stock SDK's bindings; one edited, one tested,
    # a spare one deleted.
    made = sdk(
        f"""
def hook(name, url, trigger, condition, mode):
    return bindings.post_PostWebhook(client._determined._session, body=bindings.v1Webhook(
        name=name, url=url, webhookType=bindings.v1WebhookType.DEFAULT, mode=mode,
        triggers=[bindings.v1Trigger(triggerType=trigger, condition=condition)])).webhook
session = client._determined._session
state = hook("done", "http://127.0.0.1:9/old", bindings.v1TriggerType.EXPERIMENT_STATE_CHANGE,
             {{"state": "COMPLETED"}}, bindings.v1WebhookMode.WORKSPACE)
alerts = hook("alerts", {steady.url("/custom")!r}, bindings.v1TriggerType.CUSTOM, None,
              bindings.v1WebhookMode.SPECIFIC)
slack = bindings.post_PostWebhook(session, body=bindings.v1Webhook(
    name="slack", url={steady.url("/slack")!r}, webhookType=bindings.v1WebhookType.SLACK,
    mode=bindings.v1WebhookMode.WORKSPACE, workspaceId=None, triggers=[bindings.v1Trigger(
        triggerType=bindings.v1TriggerType.EXPERIMENT_STATE_CHANGE, condition={{"state": "COMPLETED"}})]))
spare = hook("spare", {steady.url("/spare")!r}, bindings.v1TriggerType.EXPERIMENT_STATE_CHANGE,
             {{"state": "ERROR"}}, bindings.v1WebhookMode.WORKSPACE)
bindings.patch_PatchWebhook(session, id=state.id, body=bindings.v1PatchWebhook(url={flaky.url("/state")!r}))
tested = bindings.post_TestWebhook(session, id=alerts.id)
bindings.delete_DeleteWebhook(session, id=spare.id)
listed = bindings.get_GetWebhooks(session).webhooks
result = {{
    "tested": tested.completed,
    "listed": [(w.name, w.url, w.mode.value, w.webhookType.value, [t.triggerType.value for t in w.triggers])
               for w in listed],
}}
"""
    )
    assert made["tested"] is True
    assert made["listed"] == [
        [
            "",
            steady.url("/tasklog"),
            "WEBHOOK_MODE_WORKSPACE",
            "WEBHOOK_TYPE_DEFAULT",
            ["TRIGGER_TYPE_TASK_LOG"],
        ],
        [
            "done",
            flaky.url("/state"),
            "WEBHOOK_MODE_WORKSPACE",
            "WEBHOOK_TYPE_DEFAULT",
            ["TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE"],
        ],
        [
            "alerts",
            steady.url("/custom"),
            "WEBHOOK_MODE_SPECIFIC",
            "WEBHOOK_TYPE_DEFAULT",
            ["TRIGGER_TYPE_CUSTOM"],
        ],
        [
            "slack",
            steady.url("/slack"),
            "WEBHOOK_MODE_WORKSPACE",
            "WEBHOOK_TYPE_SLACK",
            ["TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE"],
        ],
    ]
    (test_event,) = steady.bodies("/custom")
    assert test_event["event_data"] == {"data": "test"} and test_event["condition"] == {"state": "COMPLETED"}

    # A user who is not an admin sees the global webhooks but may not make one.
    det = det_runner(env)
    user = requests.Session()
    user.headers["Authorization"] = "Bearer " + rest_login(base, user).json()["token"]
    seen = user.get(f"{base}/api/v1/webhooks", timeout=TIMEOUT)
    assert seen.status_code == 200 and len(seen.json()["webhooks"]) == 4
    refused = user.post(f"{base}/api/v1/webhooks", json=created.json()["webhook"], timeout=TIMEOUT)
    assert refused.status_code == 403, refused.text

    # The experiment: its trial alerts and prints the pattern; it completes.
    created_exp = det("experiment", "create", str(_config(tmp_path)), str(ALERT_DIR))
    experiment_id = int(created_exp.split("Created experiment ")[1].split()[0])
    wait_state(small_cluster.login(), experiment_id, "COMPLETED", timeout=180)

    # The state change: refused once (500), delivered at the retry.
    (state,) = flaky.wait_for(lambda got: len(got) >= 1)
    assert flaky.answered[:2] == [500, 200]
    assert state.signed_with(KEY)
    body = state.json()
    assert body["event_type"] == "EXPERIMENT_STATE_CHANGE" and body["condition"] == {"state": "COMPLETED"}
    assert body["event_data"]["experiment"]["id"] == experiment_id
    assert body["event_data"]["experiment"]["name"] == "webhooks-e2e"
    # Determined's EventPayload and ExperimentPayload keys (master/internal/webhooks/webhook.go).
    assert set(body) == {"event_id", "event_type", "timestamp", "condition", "event_data"}
    assert set(body["event_data"]) == {"experiment"}
    assert set(body["event_data"]["experiment"]) == EXPERIMENT_KEYS

    got = steady.wait_for(
        lambda got: {r.path for r in got} >= {"/tasklog", "/custom", "/slack"} and len(got) >= 4
    )
    assert all(r.signed_with(KEY) for r in got)
    (log_match,) = steady.bodies("/tasklog")
    assert log_match["event_type"] == "TASK_LOG"
    assert log_match["event_data"]["task_log"]["triggering_log"].startswith("WEBHOOK-PATTERN-42")
    assert log_match["condition"] == {"regex": r"WEBHOOK-PATTERN-\d+"}
    assert set(log_match["event_data"]) == {"task_log"}
    assert set(log_match["event_data"]["task_log"]) == {"task_id", "node_name", "triggering_log"}
    (slack,) = steady.bodies("/slack")
    assert slack["blocks"] == [
        {
            "type": "section",
            "text": {"type": "plain_text", "text": "Your experiment completed successfully 🎉"},
        }
    ]
    assert slack["attachments"][0]["blocks"][0]["text"]["text"] == f"✅ webhooks-e2e (#{experiment_id})"
    alert = steady.bodies("/custom")[-1]
    assert alert["event_type"] == "CUSTOM"
    assert alert["event_data"]["custom_data"] == {
        "title": "from trial code",
        "description": "the loss looks odd",
        "level": "WARNING",
    }
    assert (
        alert["event_data"]["experiment"]["id"] == experiment_id
        and alert["event_data"]["experiment"]["trial_id"]
    )
    assert set(alert["event_data"]) == {"experiment", "custom_data"}
    assert set(alert["event_data"]["experiment"]) == EXPERIMENT_KEYS | {"trial_id"}
    assert set(alert["condition"]) == {"state"}

"""Webhooks: bad input refused naming the field; posts owed in the transaction of their cause (an
experiment's state, a task's log line, trial code's alert) and kept through a restart; sent signed
to a real receiver on 127.0.0.1, retried with backoff after a failure, given up after a refusal or
too many failures; which webhooks hear which experiments."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from cairn.agent.v1 import agent_pb2 as apb
from services.common.principal import Principal
from services.master.domain.deletion import workspace_deletion
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.deferred_work import Backoff
from services.master.domain.kernel.errors import InvalidArgument, NotFound, PermissionDenied
from services.master.domain.metrics.logs import LogStore
from services.master.domain.webhooks import outbox, registry, sender, triggers
from services.master.domain.webhooks.payloads import AlertData
from services.master.domain.webhooks.registry import TriggerSpec, WebhookSpec
from services.master.domain.workspaces import workspaces
from services.master.store import models
from tests.support.webhook_receiver import Receiver
from tests.unit.master.domain.harness import Master
from tests.unit.master.domain.test_domain_models import Trial

# On both databases: the outbox's leases and the triggers written in their cause's transaction. The
# refusals of bad input and of bad experiment configs are checked before any SQL: SQLite alone.
each_database = pytest.mark.on_each_database

KEY = "test-signing-key"
NO_SETTINGS = workspaces.WorkspaceSettings()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def _spec(url: str, *triggers_: TriggerSpec, **fields: Any) -> WebhookSpec:
    base: dict[str, Any] = {
        "name": "hook",
        "url": url,
        "webhook_type": registry.DEFAULT,
        "mode": registry.WORKSPACE,
        "workspace_id": None,
        "triggers": triggers_ or (TriggerSpec(registry.EXPERIMENT_STATE_CHANGE, {"state": "COMPLETED"}),),
    }
    base.update(fields)
    return WebhookSpec(**base)


def _create(master: Master, spec: WebhookSpec) -> registry.WebhookRow:
    with master.ctx.unit_of_work() as w:
        return registry.create(w, master.admin, spec)


def _events(master: Master) -> list[models.WebhookEvent]:
    with master.db.read() as s:
        return list(s.scalars(select(models.WebhookEvent).order_by(models.WebhookEvent.id)))


def _time_passes(master: Master) -> None:
    with master.db.transaction() as s:
        s.execute(update(models.WebhookEvent).values(due_at=utcnow() - timedelta(seconds=1)))


def _sender(master: Master) -> sender.WebhookSender:
    return sender.WebhookSender(master.ctx, KEY, backoff=Backoff(first_s=1.0, cap_s=60.0))


BAD = [
    ({"url": ""}, "webhook.url"),
    ({"url": "ftp://example.com/x"}, "webhook.url"),
    ({"url": "not a url"}, "webhook.url"),
    ({"url": "http://h:port/x"}, "webhook.url"),
    ({"url": "http://example.com/" + "x" * 3000}, "webhook.url"),
    ({"name": "  "}, "webhook.name"),
    ({"name": "n" * 300}, "webhook.name"),
    ({"webhook_type": "UNSPECIFIED"}, "webhook.webhookType"),
    ({"mode": "SOMETIMES"}, "webhook.mode"),
    ({"triggers": ()}, "webhook.triggers"),
    ({"triggers": (TriggerSpec("NEVER"),)}, "webhook.triggers[0].triggerType"),
    (
        {"triggers": tuple(TriggerSpec(registry.TASK_LOG, {"regex": "x"}) for _ in range(21))},
        "webhook.triggers",
    ),
    (
        {"triggers": (TriggerSpec(registry.TASK_LOG, {"regex": "(unclosed"}),)},
        "webhook.triggers[0].condition.regex",
    ),
    ({"triggers": (TriggerSpec(registry.TASK_LOG, {"pattern": "x"}),)}, "webhook.triggers[0].condition"),
    (
        {"triggers": (TriggerSpec(registry.TASK_LOG, {"regex": "x" * 2000}),)},
        "webhook.triggers[0].condition.regex",
    ),
    (
        {"triggers": (TriggerSpec(registry.EXPERIMENT_STATE_CHANGE, {"state": "DONE"}),)},
        "webhook.triggers[0].condition",
    ),
    ({"triggers": (TriggerSpec(registry.CUSTOM),)}, "webhook.triggers[0].triggerType"),
]


@pytest.mark.parametrize(("fields", "named"), BAD, ids=[f"{n}-{i}" for i, (_, n) in enumerate(BAD)])
def test_bad_input_is_refused_naming_the_field_and_nothing_is_stored(
    master: Master, fields: dict[str, Any], named: str
) -> None:
    fields = dict(fields)
    with pytest.raises(InvalidArgument) as refused:
        _create(master, _spec(fields.pop("url", "http://127.0.0.1:9/hook"), **fields))
    assert str(refused.value).startswith(named + ":"), refused.value
    with master.db.read() as s:
        assert s.scalars(select(models.Webhook)).all() == []


@each_database
def test_who_may_manage_webhooks_and_edits_reach_the_url(master: Master) -> None:
    """Determined's basic rule: an admin's global webhooks, a workspace owner's webhooks of it."""
    owner, other = master.add_user("owner"), master.add_user("other")
    with master.ctx.unit_of_work() as w:
        team = workspaces.create_workspace(master.ctx, w, owner, "Team", NO_SETTINGS)
    with pytest.raises(PermissionDenied), master.ctx.unit_of_work() as w:
        registry.create(w, owner, _spec("http://127.0.0.1:9/hook"))  # global: an admin's
    with pytest.raises(NotFound, match=r"webhook\.workspaceId"):
        _create(master, _spec("http://127.0.0.1:9/hook", workspace_id=999))
    with pytest.raises(PermissionDenied), master.ctx.unit_of_work() as w:
        registry.create(w, other, _spec("http://127.0.0.1:9/hook", workspace_id=team))
    # Determined's own tests name webhooks "": a webhook may have no name.
    made = _create(master, _spec("http://127.0.0.1:9/hook", name=""))
    assert made.name == "" and made.triggers[0].webhook_id == made.id
    with master.ctx.unit_of_work() as w:
        teams = registry.create(w, owner, _spec("http://127.0.0.1:9/team", workspace_id=team))

    with master.db.read() as s:
        assert [r.id for r in registry.listed(s, master.admin)] == [made.id, teams.id]
        assert [r.id for r in registry.listed(s, owner)] == [made.id, teams.id]
        assert [r.id for r in registry.listed(s, other)] == [made.id]  # not another's workspace's
    for who, which in ((other, teams.id), (owner, made.id)):
        with pytest.raises(PermissionDenied), master.ctx.unit_of_work() as w:
            registry.delete(w, who, which)
    with pytest.raises(InvalidArgument, match=r"webhook\.url"), master.ctx.unit_of_work() as w:
        registry.patch_url(w, master.admin, made.id, "mailto:x@y")
    with pytest.raises(NotFound, match="id: no webhook 999"), master.ctx.unit_of_work() as w:
        registry.patch_url(w, master.admin, 999, "https://example.com/new")
    with master.ctx.unit_of_work() as w:
        registry.patch_url(w, master.admin, made.id, "https://example.com/new")
    with master.ctx.unit_of_work() as w:
        registry.delete(w, owner, teams.id)
    with master.db.read() as s:
        assert [r.url for r in registry.listed(s, master.admin)] == ["https://example.com/new"]
    with master.ctx.unit_of_work() as w:
        registry.delete(w, master.admin, made.id)
    with master.db.read() as s:
        assert registry.listed(s, master.admin) == []
        assert s.scalars(select(models.WebhookTrigger)).all() == []


@each_database
def test_a_state_change_owes_its_post_with_the_state_kept_through_a_restart_and_sent_signed(
    master: Master, tmp_path: Path, receiver: Receiver
) -> None:
    _create(master, _spec(receiver.url("/default")))
    _create(master, _spec(receiver.url("/slack"), name="slack", webhook_type=registry.SLACK))
    _create(
        master,
        _spec(receiver.url("/errors"), TriggerSpec(registry.EXPERIMENT_STATE_CHANGE, {"state": "ERROR"})),
    )
    trial = Trial(master, tmp_path / "storage")
    assert _events(master) == []
    trial.complete()
    # Committed with the state: two posts owed (the ERROR webhook hears nothing).
    assert sorted(e.url.rsplit("/", 1)[1] for e in _events(master)) == ["default", "slack"]

    master.close()
    again = master.restarted()
    try:
        assert len(_events(again)) == 2  # still owed after the restart
        _sender(again).send_due()
        assert _events(again) == []
    finally:
        again.close()

    (default,) = [r for r in receiver.received if r.path == "/default"]
    assert default.signed_with(KEY)
    assert default.headers["Content-Type"] == "application/json; charset=UTF-8"
    body = default.json()
    assert body["event_type"] == "EXPERIMENT_STATE_CHANGE"
    assert body["condition"] == {"state": "COMPLETED"}
    experiment = body["event_data"]["experiment"]
    assert experiment["id"] == trial.experiment_id and experiment["state"] == "COMPLETED"
    assert experiment["workspace"] == "Uncategorized" and experiment["project"] == "Uncategorized"
    assert {"name", "duration", "resource_pool", "slots_per_trial"} <= set(experiment)
    assert isinstance(body["timestamp"], int) and len(body["event_id"]) == 36

    (slack,) = [r for r in receiver.received if r.path == "/slack"]
    assert slack.signed_with(KEY)
    message = slack.json()
    assert message["blocks"][0]["text"]["text"] == "Your experiment completed successfully 🎉"
    (attachment,) = message["attachments"]
    assert attachment["color"] == "#13B670"
    assert attachment["blocks"][0]["text"]["text"].startswith("✅ ")
    assert "*Status*: Completed" in [f["text"] for f in attachment["blocks"][0]["fields"]]


@each_database
def test_a_failed_send_is_retried_with_backoff_and_a_refused_or_hopeless_one_given_up(master: Master) -> None:
    failing = Receiver([500, 503])
    refusing = Receiver([404])
    down = "http://127.0.0.1:9/nobody-listens"
    try:
        with master.ctx.unit_of_work() as w:
            outbox.enqueue(master.ctx, w, failing.url(), '{"n":1}')
            outbox.enqueue(master.ctx, w, refusing.url(), '{"n":2}')
            outbox.enqueue(master.ctx, w, down, '{"n":3}')
        send = _sender(master)
        send.send_due()
        by_url = {e.url: e for e in _events(master)}
        assert set(by_url) == {failing.url(), down}  # the refused one is given up at once
        assert refusing.answered == [404]
        for event in by_url.values():
            assert event.attempts == 1 and event.last_error and event.claimed_by == ""
            assert 0 < (event.due_at - utcnow()).total_seconds() <= 1.0  # the first backoff
        assert send.send_due() == 0  # not due yet

        _time_passes(master)
        send.send_due()
        assert {e.url: e.attempts for e in _events(master)} == {failing.url(): 2, down: 2}
        _time_passes(master)
        send.send_due()
        assert [e.url for e in _events(master)] == [down]  # delivered at the third try
        assert failing.answered == [500, 503, 200] and failing.bodies() == [{"n": 1}]
        for _ in range(sender.MAX_ATTEMPTS):
            _time_passes(master)
            send.send_due()
        assert _events(master) == []  # given up after MAX_ATTEMPTS
        send.close()
    finally:
        failing.close()
        refusing.close()


@each_database
def test_which_webhooks_hear_which_experiments(master: Master, tmp_path: Path, receiver: Receiver) -> None:
    with master.ctx.unit_of_work() as w:
        other = models.Workspace(name="other", user_id=master.admin.user_id, created_at=utcnow())
        w.session.add(other)
        w.session.flush()
        other_id = other.id
    _create(master, _spec(receiver.url("/global")))
    _create(master, _spec(receiver.url("/mine"), name="mine", workspace_id=1))
    _create(master, _spec(receiver.url("/theirs"), name="theirs", workspace_id=other_id))
    by_name = _create(
        master, _spec(receiver.url("/named"), name="named", mode=registry.SPECIFIC, workspace_id=1)
    )
    by_id = _create(master, _spec(receiver.url("/by-id"), name="by-id", mode=registry.SPECIFIC))
    _create(master, _spec(receiver.url("/unnamed"), name="unnamed", mode=registry.SPECIFIC))

    def heard(config: dict[str, Any] | None) -> list[str]:
        facts_ws = 1
        # A session left open here held its connection past the test, into the next one's copy
        # of the template over the same file (SQLite: "disk I/O error" there).
        with master.db.read() as s:
            rows = registry.rows(s)
        return sorted(
            row.url.rsplit("/", 1)[1]
            for row in rows
            if triggers.hears(row, triggers.webhooks_config(config), facts_ws, is_experiment=True)
        )

    assert heard(None) == ["global", "mine"]
    named = {"integrations": {"webhooks": {"webhook_name": ["named"], "webhook_id": [by_id.id]}}}
    assert heard(named) == ["by-id", "global", "mine", "named"]
    assert heard({"integrations": {"webhooks": {"exclude": True}}}) == []
    assert by_name.mode == registry.SPECIFIC

    # End to end through an experiment's end: its config names one SPECIFIC webhook.
    trial = Trial.__new__(Trial)
    master.add_agent("a1")
    trial.master = master
    experiment_id = master.create(integrations={"webhooks": {"webhook_name": ["named"]}})
    (row,) = master.trials(experiment_id)
    (container,) = master.run_containers(master.live(row.id).id)
    master.report(row.id, 1, "validation", 10, 1, loss=0.5)
    master.exit(container, 0)
    assert sorted(e.url.rsplit("/", 1)[1] for e in _events(master)) == ["global", "mine", "named"]


@each_database
def test_a_task_log_pattern_fires_once_per_task_however_often_it_matches(
    master: Master, receiver: Receiver
) -> None:
    _create(
        master,
        _spec(receiver.url("/log"), TriggerSpec(registry.TASK_LOG, {"regex": r"CUDA out of memory|OOM \d+"})),
    )
    _create(
        master,
        _spec(
            receiver.url("/slack-log"),
            TriggerSpec(registry.TASK_LOG, {"regex": "OOM"}),
            webhook_type=registry.SLACK,
        ),
    )
    master.add_agent("a1")
    experiment_id = master.create()
    (row,) = master.trials(experiment_id)
    (container,) = master.run_containers(master.live(row.id).id)
    store = LogStore(master.ctx)

    def lines(*messages: tuple[int, str]) -> apb.LogBatch:
        return apb.LogBatch(
            entries=[apb.LogEntry(container_id=container, seq=seq, message=m) for seq, m in messages]
        )

    store.store("a1", lines((1, "epoch 1"), (2, "fine")))
    assert _events(master) == []
    store.store("a1", lines((3, "RuntimeError: OOM 12"), (4, "again OOM 13")))
    store.store("a1", lines((3, "RuntimeError: OOM 12")))  # resent
    assert sorted(e.url.rsplit("/", 1)[1] for e in _events(master)) == ["log", "slack-log"]
    assert master.ctx.webhook_wakeup.generation > 0

    _sender(master).send_due()
    (body,) = receiver.bodies("/log")
    assert body["event_type"] == "TASK_LOG"
    assert body["condition"] == {"regex": r"CUDA out of memory|OOM \d+"}
    assert body["event_data"]["task_log"] == {
        "task_id": master.live(row.id).task_id,
        "node_name": "a1",
        "triggering_log": "RuntimeError: OOM 12",
    }
    (slack,) = receiver.bodies("/slack-log")
    text = slack["blocks"][0]["text"]["text"]
    assert f"Experiment ID `{experiment_id}`, Trial ID `{row.id}`, running on node `a1`" in text
    assert f"View full logs at /det/experiments/{experiment_id}/trials/{row.id}/logs" in text

    # A trigger deleted after its patterns were read: the lines are stored all the same.
    with master.ctx.unit_of_work() as w:
        for hook in registry.rows(w.session):
            registry.delete(w, master.admin, hook.id)
    store.store("a1", lines((5, "OOM 14")))
    with master.db.read() as s:
        assert s.scalar(select(models.TaskLog.message).where(models.TaskLog.seq == 5)) == "OOM 14"


@each_database
def test_trial_codes_alert_reaches_the_custom_triggers_its_experiment_names(
    master: Master, receiver: Receiver
) -> None:
    named = _create(
        master,
        _spec(receiver.url("/custom"), TriggerSpec(registry.CUSTOM), name="alerts", mode=registry.SPECIFIC),
    )
    _create(
        master,
        _spec(receiver.url("/other"), TriggerSpec(registry.CUSTOM), name="other", mode=registry.SPECIFIC),
    )
    master.add_agent("a1")
    experiment_id = master.create(integrations={"webhooks": {"webhook_name": ["alerts"]}})
    (row,) = master.trials(experiment_id)
    alert = AlertData(title="t", description="d", level="WARNING")
    with master.ctx.unit_of_work() as w:
        assert triggers.custom_alert(master.ctx, w, master.admin, experiment_id, row.id, alert) == 1
    with pytest.raises(NotFound, match="experimentId"), master.ctx.unit_of_work() as w:
        triggers.custom_alert(master.ctx, w, master.admin, 9999, None, alert)
    with pytest.raises(NotFound, match="trialId"), master.ctx.unit_of_work() as w:
        triggers.custom_alert(master.ctx, w, master.admin, experiment_id, row.id + 100, alert)
    trial_code = Principal(allocation_id=master.live(row.id).id)
    other = master.create()
    with pytest.raises(PermissionDenied), master.ctx.unit_of_work() as w:
        triggers.custom_alert(master.ctx, w, trial_code, other, None, alert)

    _sender(master).send_due()
    (body,) = receiver.bodies("/custom")
    assert receiver.bodies("/other") == []
    assert body["event_type"] == "CUSTOM"
    assert body["event_data"]["custom_data"] == {"title": "t", "description": "d", "level": "WARNING"}
    assert body["event_data"]["experiment"]["trial_id"] == row.id
    assert named.id > 0


@pytest.mark.parametrize(
    ("webhooks", "named"),
    [
        ({"webhook_id": ["seven"]}, "integrations.webhooks.webhook_id"),
        ({"webhook_name": "one"}, "integrations.webhooks.webhook_name"),
        ({"webhook_name": ["n"] * 101}, "integrations.webhooks.webhook_name"),
        ({"hooks": ["n"]}, "integrations.webhooks"),
    ],
)
def test_an_experiments_webhooks_config_is_checked(
    master: Master, webhooks: dict[str, Any], named: str
) -> None:
    with pytest.raises(InvalidArgument, match=named.replace(".", r"\.")):
        master.create(integrations={"webhooks": webhooks})


@each_database
def test_a_workspaces_webhooks_go_with_it(master: Master) -> None:
    with master.ctx.unit_of_work() as w:
        team = workspaces.create_workspace(master.ctx, w, master.admin, "Team", NO_SETTINGS)
    mine = _create(
        master,
        _spec("http://127.0.0.1:9/team", TriggerSpec(registry.TASK_LOG, {"regex": "x"}), workspace_id=team),
    )
    kept = _create(master, _spec("http://127.0.0.1:9/global"))
    workspace_deletion.delete_workspace(master.ctx, master.admin, team)
    master.run_deferred()
    with master.db.read() as s:
        assert [r.id for r in registry.rows(s)] == [kept.id]
        assert (
            s.scalars(
                select(models.WebhookTrigger.id).where(models.WebhookTrigger.webhook_id == mine.id)
            ).all()
            == []
        )

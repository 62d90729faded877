"""Webhooks: Determined's webhooks API (create, list, edit the URL, delete, test) and trial code's
custom alert (`POST /api/v1/webhooks/custom`, Core API `context.alert`)."""

from __future__ import annotations

import grpc

from cairn.api.v1 import trial_pb2
from cairn.api.v1 import webhook_pb2 as wpb
from services.master.domain.webhooks import registry, testing, triggers
from services.master.domain.webhooks.payloads import AlertData
from services.master.domain.webhooks.registry import TriggerSpec, WebhookRow, WebhookSpec
from services.master.servicers.api import convert
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.api.templates import plain
from services.master.servicers.errors import rpc

_TYPE_PREFIX = "WEBHOOK_TYPE_"
_TRIGGER_PREFIX = "TRIGGER_TYPE_"
_MODE_PREFIX = "WEBHOOK_MODE_"


def _unprefixed(name: str, prefix: str) -> str:
    return name[len(prefix) :] if name.startswith(prefix) else name


def spec(message: wpb.Webhook) -> WebhookSpec:
    mode = _unprefixed(wpb.WebhookMode.Name(message.mode), _MODE_PREFIX)
    return WebhookSpec(
        name=message.name,
        url=message.url,
        webhook_type=_unprefixed(wpb.WebhookType.Name(message.webhook_type), _TYPE_PREFIX),
        # A client that sends no mode (Determined's before modes) gets a webhook of all experiments.
        mode=registry.WORKSPACE if mode == "UNSPECIFIED" else mode,
        workspace_id=message.workspace_id or None,
        triggers=tuple(
            TriggerSpec(
                trigger_type=_unprefixed(wpb.TriggerType.Name(t.trigger_type), _TRIGGER_PREFIX),
                condition={k: plain(v) for k, v in t.condition.fields.items()},
            )
            for t in message.triggers
        ),
    )


def webhook_message(row: WebhookRow) -> wpb.Webhook:
    return wpb.Webhook(
        id=row.id,
        url=row.url,
        name=row.name,
        workspace_id=row.workspace_id or 0,
        webhook_type=wpb.WebhookType.Value(_TYPE_PREFIX + row.webhook_type),
        mode=wpb.WebhookMode.Value(_MODE_PREFIX + row.mode),
        triggers=[
            wpb.Trigger(
                id=t.id,
                webhook_id=t.webhook_id,
                trigger_type=wpb.TriggerType.Value(_TRIGGER_PREFIX + t.trigger_type),
                condition=convert.struct(t.condition),
            )
            for t in row.triggers
        ],
    )


def _level(level: trial_pb2.LogLevel.ValueType) -> str:
    """Determined's task log level names (model.TaskLogLevelFromProto): INFO, WARNING, ...; an
    unset level is INFO, as the Core API's default."""
    if level == trial_pb2.LOG_LEVEL_UNSPECIFIED or level not in trial_pb2.LogLevel.values():
        return "INFO"
    return _unprefixed(trial_pb2.LogLevel.Name(level), "LOG_LEVEL_")


class WebhooksApi(ServicerBase):
    @rpc
    def GetWebhooks(
        self, request: wpb.GetWebhooksRequest, context: grpc.ServicerContext
    ) -> wpb.GetWebhooksResponse:
        principal = self.user(context)
        with self.ctx.db.read() as s:
            rows = registry.listed(s, principal)
        return wpb.GetWebhooksResponse(webhooks=[webhook_message(r) for r in rows])

    @rpc
    def PostWebhook(
        self, request: wpb.PostWebhookRequest, context: grpc.ServicerContext
    ) -> wpb.PostWebhookResponse:
        principal = self.user(context)
        with self.ctx.unit_of_work() as w:
            row = registry.create(w, principal, spec(request.webhook))
        return wpb.PostWebhookResponse(webhook=webhook_message(row))

    @rpc
    def PatchWebhook(
        self, request: wpb.PatchWebhookRequest, context: grpc.ServicerContext
    ) -> wpb.PatchWebhookResponse:
        principal = self.user(context)
        with self.ctx.unit_of_work() as w:
            registry.patch_url(w, principal, request.id, request.webhook.url)
        return wpb.PatchWebhookResponse()

    @rpc
    def DeleteWebhook(
        self, request: wpb.DeleteWebhookRequest, context: grpc.ServicerContext
    ) -> wpb.DeleteWebhookResponse:
        principal = self.user(context)
        with self.ctx.unit_of_work() as w:
            registry.delete(w, principal, request.id)
        return wpb.DeleteWebhookResponse()

    @rpc
    def TestWebhook(
        self, request: wpb.TestWebhookRequest, context: grpc.ServicerContext
    ) -> wpb.TestWebhookResponse:
        principal = self.user(context)
        testing.send_test(self.ctx, principal, request.id, self.deps.webhooks)
        return wpb.TestWebhookResponse(completed=True)

    @rpc
    def PostWebhookEventData(
        self, request: wpb.PostWebhookEventDataRequest, context: grpc.ServicerContext
    ) -> wpb.PostWebhookEventDataResponse:
        # Trial code calls it with its allocation token (its own experiment and trial only).
        principal = self.caller(context)
        data = request.data
        alert = AlertData(
            title=data.title[: triggers.MAX_ALERT_CHARS],
            description=data.description[: triggers.MAX_ALERT_CHARS],
            level=_level(data.level),
        )
        with self.ctx.unit_of_work() as w:
            triggers.custom_alert(
                self.ctx, w, principal, request.experiment_id, request.trial_id or None, alert
            )
        return wpb.PostWebhookEventDataResponse()

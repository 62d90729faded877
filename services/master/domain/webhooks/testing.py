"""`TestWebhook`: a mock event posted to a webhook at once (not through the outbox), as Determined
does, so that the caller learns whether the receiver answers."""

from __future__ import annotations

from services.common.principal import Principal
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.errors import FailedPrecondition
from services.master.domain.webhooks import payloads, registry
from services.master.domain.webhooks.sender import Delivery, WebhookSender, post


def send_test(ctx: MasterContext, principal: Principal, webhook_id: int, sender: WebhookSender) -> None:
    with ctx.db.read() as s:
        webhook = registry.check_may_test(s, principal, webhook_id)
    body = payloads.test_event(webhook.webhook_type, utcnow())
    outcome, why = post(sender.client, sender.signing_key, webhook.url, body)
    if outcome != Delivery.DELIVERED:
        raise FailedPrecondition(
            f"id: webhook {webhook_id}'s test event was not delivered to {webhook.url}: {why}"
        )

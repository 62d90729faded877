"""The webhook sender: claims due events from the outbox and posts them, signed, with one pooled
HTTP client, a few at a time, outside every unit of work. A receiver's 2xx or 3xx delivers the
event; a 4xx gives it up (the receiver refuses it: sending again will not help, as Determined
treats it); a 5xx, a timeout or a refused connection retries it with capped exponential backoff
and jitter, at most MAX_ATTEMPTS sends, through master restarts (the outbox keeps the count)."""

from __future__ import annotations

import functools
import ssl
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from services.common.logging import get_logger
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.deferred_work import Backoff
from services.master.domain.kernel.loops import BackgroundLoop
from services.master.domain.webhooks import outbox
from services.master.domain.webhooks.payloads import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign

log = get_logger(__name__)

# About two minutes of backoff (1, 2, 4, ... 60 s, halved at worst) before an event is given up:
# a receiver that restarts still gets it.
MAX_ATTEMPTS = 8
# Sends at once (Determined runs three workers); each holds a connection of the pool.
WORKERS = 3
SEND_TIMEOUT_S = 10.0
PERIOD_S = 1.0
DEFAULT_BACKOFF = Backoff(first_s=1.0, cap_s=60.0)


class Delivery:
    """One send's outcome: delivered, refused for good, or worth another try."""

    DELIVERED = "delivered"
    REFUSED = "refused"
    FAILED = "failed"


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """The certificate store is read once a process (a new context reads the whole CA bundle again,
    tens of milliseconds); SSLContext is safe to share between clients and threads."""
    return httpx.create_ssl_context()


def new_client() -> httpx.Client:
    return httpx.Client(
        verify=_tls_context(),
        timeout=httpx.Timeout(SEND_TIMEOUT_S),
        limits=httpx.Limits(max_connections=WORKERS * 2, max_keepalive_connections=WORKERS),
        follow_redirects=False,
        headers={"User-Agent": "cairn-master-webhooks"},
    )


def post(client: httpx.Client, signing_key: str, url: str, body: str) -> tuple[str, str]:
    """Post `body` to `url`, signed now; the outcome and, when not delivered, why."""
    data = body.encode()
    timestamp = int(time.time())
    headers = {
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: sign(signing_key, timestamp, data),
        "Content-Type": "application/json; charset=UTF-8",
    }
    try:
        response = client.post(url, content=data, headers=headers)
    except httpx.HTTPError as exc:
        return Delivery.FAILED, f"{type(exc).__name__}: {exc}"
    if response.status_code >= 500:
        return Delivery.FAILED, f"the receiver answered {response.status_code}"
    if response.status_code >= 400:
        return Delivery.REFUSED, f"the receiver answered {response.status_code}"
    return Delivery.DELIVERED, ""


class WebhookSender:
    """`send_due` is the loop's step; tests call it directly."""

    def __init__(
        self,
        ctx: MasterContext,
        signing_key: str,
        client: httpx.Client | None = None,
        backoff: Backoff = DEFAULT_BACKOFF,
    ) -> None:
        self._ctx = ctx
        self._key = signing_key
        self._client = client or new_client()
        self._backoff = backoff
        self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="webhook-send")

    @property
    def client(self) -> httpx.Client:
        return self._client

    @property
    def signing_key(self) -> str:
        return self._key

    def send_due(self) -> int:
        """Send what is due, batch after batch, until nothing is; how many sends were made."""
        sent = 0
        holder = self._ctx.master_id
        while not self._ctx.stopping.is_set() and outbox.any_due(self._ctx):
            batch = outbox.claim(self._ctx, holder)
            if not batch:
                break  # another master took them
            list(self._pool.map(lambda event: self._send(event, holder), batch))
            sent += len(batch)
        return sent

    def _send(self, event: outbox.Claimed, holder: str) -> None:
        outcome, why = post(self._client, self._key, event.url, event.payload)
        attempt = event.attempts + 1
        if outcome == Delivery.DELIVERED:
            outbox.done(self._ctx, event.id, holder)
            return
        if outcome == Delivery.REFUSED or attempt >= MAX_ATTEMPTS:
            log.warning(
                "webhook event given up", event_id=event.id, url=event.url, attempts=attempt, error=why
            )
            outbox.done(self._ctx, event.id, holder)
            return
        delay = self._backoff.delay(attempt)
        log.info("webhook send failed; will retry", event_id=event.id, retry_in_s=round(delay, 1), error=why)
        outbox.retry_later(self._ctx, event.id, holder, delay, why)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._client.close()


def start(ctx: MasterContext, sender: WebhookSender) -> BackgroundLoop:
    """The master's webhook sender, from start-up to stop (registered in app.py)."""

    def step() -> None:
        sender.send_due()

    loop = BackgroundLoop(ctx, "webhook-sender", step, period_s=PERIOD_S, wakeup=ctx.webhook_wakeup)
    loop.start()
    return loop

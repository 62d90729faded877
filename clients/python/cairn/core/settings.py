"""Timings and sizes of the Core API's talk with the master, gathered so tests can shorten them."""

from __future__ import annotations

from dataclasses import dataclass, field

from cairn.core.retry import RetryPolicy


@dataclass(frozen=True)
class CoreSettings:
    # Deadline of one attempt of a unary call; a call that hangs longer is retried.
    call_timeout_s: float = 30.0
    # Retrying calls (metric batches included) through an outage of the master.
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    # A metrics batch goes out when it holds this many reports or its first report is this old
    # (one JSON document of ~2,000 reports is a few hundred KB: the master stores it in one go).
    metrics_batch_size: int = 2000
    metrics_linger_s: float = 0.5
    # Reports waiting to be sent; a full queue makes report calls wait (back-pressure).
    metrics_queue_size: int = 20_000
    # When the training code leaves the context with an exception, unsent metrics get this long.
    flush_on_error_s: float = 30.0
    # Reconnecting the signal stream (or the long poll) after it broke.
    watch_retry: RetryPolicy = field(
        default_factory=lambda: RetryPolicy(first_delay_s=0.5, max_delay_s=30.0, give_up_after_s=float("inf"))
    )
    # A stream that stayed up this long was healthy: the next reconnect starts from the first delay.
    watch_healthy_after_s: float = 30.0
    # Determined's preemption long poll asks for this many seconds at a time.
    long_poll_s: int = 60
    # A master with no room for one more waiting signal watch (its --max-signal-waiters) tells the
    # state as it is and ends the stream: asked again after about this long (give or take a fifth,
    # so that many trials spread their asks), until it has room.
    watch_busy_poll_s: float = 10.0

"""The trial's connection to the master: one channel, the allocation token on every call, and
unary calls retried through short outages."""

from __future__ import annotations

import os
import threading
import time
from typing import TypeVar

import grpc

# grpc imports its channel code on the first channel made (~18 ms). Imported with this module, it
# is already loaded in an agent's prepared interpreter (warm starts), off the trial's time.
from grpc import _channel  # noqa: F401

from cairn.api.v1 import api_pb2_grpc
from cairn.client.address import parse_master_addresses
from cairn.core.retry import call_with_retry
from cairn.core.settings import CoreSettings
from cairn.metadata_keys import ALLOCATION_TOKEN_KEY
from cairn.tls import ca_from_environment, channel_credentials
from cairn.wire import CHANNEL_OPTIONS

Request = TypeVar("Request")
Response = TypeVar("Response")


class MasterSession:
    """Safe to share between threads (gRPC channels are)."""

    def __init__(self, address: str, allocation_token: str, settings: CoreSettings) -> None:
        self.address = address
        self.settings = settings
        self.metadata: tuple[tuple[str, str], ...] = ((ALLOCATION_TOKEN_KEY, f"Bearer {allocation_token}"),)
        # One address or several (an active master and its standbys): the channel fails over.
        addresses = parse_master_addresses(address)
        # A master with TLS: the agent hands its CA to the task ($CAIRN_MASTER_CERT_PEM), and the
        # master's certificate is verified against it.
        ca_pem = ca_from_environment()
        if ca_pem or addresses.tls:
            credentials = channel_credentials(ca_pem)
            self._channel = grpc.secure_channel(addresses.dial_target, credentials, options=CHANNEL_OPTIONS)
        else:
            self._channel = grpc.insecure_channel(addresses.dial_target, options=CHANNEL_OPTIONS)
        self.stub = api_pb2_grpc.CairnStub(self._channel)
        # Set on close: retry pauses end at once instead of holding the process.
        self.closing = threading.Event()

    def call(
        self,
        method: grpc.UnaryUnaryMultiCallable[Request, Response],
        request: Request,
        *,
        what: str,
    ) -> Response:
        """Call `method`, retrying transient failures; raises MasterCallError when it gives up."""
        timeout = self.settings.call_timeout_s
        return call_with_retry(
            lambda: method(request, timeout=timeout, metadata=self.metadata),
            self.settings.retry,
            what=what,
            master=self.address,
            interrupt=self.closing,
        )

    def close(self) -> None:
        self.closing.set()
        self._channel.close()


def warm_up() -> None:
    """Pay, ahead of any trial, what a process's first channel and stub cost whatever the master:
    called by an agent's prepared interpreter while it waits for its command (warm starts). gRPC's
    one-time setup (a second channel costs a fifth of the first), the API's method table and, in
    an interpreter forked from a zygote, the pages they touch copied: ~2-3 ms of a warm trial's
    Core API start. The channel is never dialled (channels connect on their first call) and is
    closed at once; the threads gRPC started for it end a few milliseconds later, and this waits
    for that (briefly), so that the command starts in a process with no thread it did not start."""
    threads_before = _thread_count()
    channel = grpc.insecure_channel("127.0.0.1:9", options=CHANNEL_OPTIONS)
    try:
        api_pb2_grpc.CairnStub(channel)
    finally:
        channel.close()
    deadline = time.monotonic() + WARM_UP_SETTLE_S
    while _thread_count() > threads_before and time.monotonic() < deadline:
        time.sleep(0.001)


# How long warm_up waits for gRPC's threads to end (they take ~2 ms).
WARM_UP_SETTLE_S = 0.1


def _thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0  # no /proc: nothing to wait for

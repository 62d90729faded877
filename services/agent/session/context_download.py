"""Downloading an allocation's model definition from the master (AgentService.FetchTaskContext)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc

from cairn.agent.v1 import agent_pb2 as apb
from cairn.agent.v1 import agent_pb2_grpc
from services.agent.containers.preparation import ContextFetchError
from services.agent.session.backoff import Backoff
from services.common.logging import get_logger

log = get_logger(__name__)

# The master answers UNAVAILABLE while it or its database is away (a PostgreSQL restart takes up to
# tens of seconds): the download is tried again for this long before the start fails.
RETRY_FOR_SECONDS = 60.0
# A model definition is at most ~100 MiB; this bounds a stalled download, not a slow one.
TIMEOUT_SECONDS = 600.0


class ContextDownloader:
    def __init__(self, channel: grpc.Channel) -> None:
        self._stub = agent_pb2_grpc.AgentServiceStub(channel)

    def fetch(self, allocation_id: str) -> Iterator[bytes]:
        """The archive's bytes in chunks. Retries while the master is unreachable, also when it
        went away in the middle of a download (killed, restarting): the archive is one stored row
        (the experiment's model definition or the task's context), the same bytes on every call,
        so a new download skips what was already handed out and goes on from there. Raises
        ContextFetchError otherwise."""
        backoff = Backoff(initial=0.5, maximum=5.0)
        request = apb.FetchTaskContextRequest(allocation_id=allocation_id)
        give_up_at = time.monotonic() + RETRY_FOR_SECONDS
        handed_out = 0
        while True:
            offset = 0  # of this call's stream
            try:
                for chunk in self._stub.FetchTaskContext(request, timeout=TIMEOUT_SECONDS):
                    data = chunk.data
                    end = offset + len(data)
                    if end > handed_out:
                        yield data[max(0, handed_out - offset) :]
                        handed_out = end
                    offset = end
                if offset < handed_out:
                    raise ContextFetchError(
                        f"the model definition changed during its download ({offset} bytes, "
                        f"{handed_out} before)"
                    )
                return
            except grpc.RpcError as exc:
                code = exc.code()
                delay = backoff.next_delay()
                if code == grpc.StatusCode.UNAVAILABLE and time.monotonic() + delay < give_up_at:
                    log.warning(
                        "model definition download failed; retrying",
                        allocation_id=allocation_id,
                        in_s=round(delay, 2),
                        received=handed_out,
                        error=exc.details(),
                    )
                    time.sleep(delay)
                    continue
                name = code.name if code is not None else "UNKNOWN"
                raise ContextFetchError(f"{name}: {exc.details()}") from exc

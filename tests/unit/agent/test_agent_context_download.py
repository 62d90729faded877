"""The agent's download of a model definition rides out a master that answers UNAVAILABLE (its
database restarting) or goes away in the middle of a download (killed), for a bounded time,
handing out every byte once; other errors fail the start at once."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from cairn.agent.v1 import agent_pb2 as apb
from cairn.agent.v1 import agent_pb2_grpc
from services.agent.containers.preparation import ContextFetchError
from services.agent.session import context_download
from services.agent.session.context_download import ContextDownloader


class _Master(agent_pb2_grpc.AgentServiceServicer):
    def __init__(self) -> None:
        self.failures: list[grpc.StatusCode] = []
        self.cut_after_first_chunk = 0  # calls that end UNAVAILABLE after their first chunk
        self.chunks = [b"model ", b"definition"]
        self.calls = 0

    def FetchTaskContext(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        self.calls += 1
        if self.failures:
            context.abort(self.failures.pop(0), "the database is unavailable (test)")
        for index, data in enumerate(self.chunks):
            yield apb.FetchTaskContextChunk(data=data)
            if index == 0 and self.cut_after_first_chunk:
                self.cut_after_first_chunk -= 1
                context.abort(grpc.StatusCode.UNAVAILABLE, "Stream removed (test)")


@pytest.fixture
def master() -> Iterator[tuple[_Master, grpc.Channel]]:
    servicer = _Master()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    agent_pb2_grpc.add_AgentServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield servicer, channel
    finally:
        channel.close()
        server.stop(None)


def test_the_download_waits_out_a_master_that_answers_unavailable(master: Any) -> None:
    servicer, channel = master
    servicer.failures = [grpc.StatusCode.UNAVAILABLE] * 2
    assert b"".join(ContextDownloader(channel).fetch("1.1.1")) == b"model definition"
    assert servicer.calls == 3


def test_a_download_cut_in_the_middle_goes_on_after_what_was_handed_out(master: Any) -> None:
    # CI saw it: the master was killed while an agent fetched a model definition; the chunks
    # already written must not be written again, nor the start fail as the task's error.
    servicer, channel = master
    servicer.cut_after_first_chunk = 2
    chunks = list(ContextDownloader(channel).fetch("1.1.1"))
    assert b"".join(chunks) == b"model definition" and chunks[0] == b"model "
    assert servicer.calls == 3


def test_a_download_cut_in_the_middle_goes_on_within_a_chunk(master: Any) -> None:
    servicer, channel = master
    servicer.cut_after_first_chunk = 1
    downloads = ContextDownloader(channel).fetch("1.1.1")
    assert next(downloads) == b"model "
    servicer.chunks = [b"mod", b"el definition"]  # the same bytes, cut elsewhere
    assert b"".join(downloads) == b"definition"


def test_an_archive_that_shrank_between_calls_is_refused(master: Any) -> None:
    servicer, channel = master
    servicer.cut_after_first_chunk = 1
    downloads = ContextDownloader(channel).fetch("1.1.1")
    assert next(downloads) == b"model "
    servicer.chunks = [b"mod"]
    with pytest.raises(ContextFetchError, match="changed during its download"):
        b"".join(downloads)


def test_the_download_gives_up_after_its_budget(master: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    servicer, channel = master
    monkeypatch.setattr(context_download, "RETRY_FOR_SECONDS", 1.0)
    servicer.failures = [grpc.StatusCode.UNAVAILABLE] * 10_000
    with pytest.raises(ContextFetchError, match="UNAVAILABLE"):
        b"".join(ContextDownloader(channel).fetch("1.1.1"))
    assert 1 <= servicer.calls <= 5


def test_other_errors_fail_at_once(master: Any) -> None:
    servicer, channel = master
    servicer.failures = [grpc.StatusCode.NOT_FOUND]
    with pytest.raises(ContextFetchError, match="NOT_FOUND"):
        b"".join(ContextDownloader(channel).fetch("1.1.1"))
    assert servicer.calls == 1

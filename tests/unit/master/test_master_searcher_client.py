"""The master's searcher client over a real socket: a backlog goes in one HandleEvents call, and a
searcher that predates HandleEvents (UNIMPLEMENTED) gets the events one at a time from then on."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import grpc
import pytest
from google.protobuf import struct_pb2

from cairn.searcher.v1 import searcher_pb2 as pb
from cairn.searcher.v1 import searcher_pb2_grpc
from cairn.searcher_plugin.servicer import SERVICE_NAME, SearcherServicer
from services.common.server import ServiceServer, start_server
from services.master.remotes.searcher import SearcherClient, SearcherDirectory
from services.searcher.domain.factory import BuiltinSearches
from services.searcher.domain.registry import builtin_registry


class WithoutBatches(SearcherServicer):
    """A searcher built before HandleEvents existed: the generated base answers UNIMPLEMENTED."""

    HandleEvents = searcher_pb2_grpc.SearcherServiceServicer.HandleEvents  # type: ignore[assignment]


def serving(servicer: SearcherServicer) -> ServiceServer:
    def register(server: grpc.Server) -> Sequence[str]:
        searcher_pb2_grpc.add_SearcherServiceServicer_to_server(servicer, server)
        return [SERVICE_NAME]

    return start_server("searcher", register, host="127.0.0.1", port=0)


@pytest.fixture(params=["batches", "without"])
def client(request: pytest.FixtureRequest) -> Iterator[tuple[str, SearcherClient]]:
    kind = SearcherServicer if request.param == "batches" else WithoutBatches
    server = serving(kind(BuiltinSearches(builtin_registry())))
    searcher = SearcherClient(f"127.0.0.1:{server.port}", None, replays_exactly=True)
    try:
        yield request.param, searcher
    finally:
        searcher.shutdown()
        server.stop(0)


def spec() -> pb.SearchSpec:
    searcher = struct_pb2.Struct()
    searcher.update({"name": "random", "metric": "loss", "max_trials": 4, "max_concurrent_trials": 4})
    hparams = struct_pb2.Struct()
    hparams.update({"x": {"type": "double", "minval": 0, "maxval": 1}})
    return pb.SearchSpec(searcher=searcher, hyperparameters=hparams, seed=7)


def test_a_backlog_is_sent_whole_or_one_event_at_a_time(client: tuple[str, SearcherClient]) -> None:
    kind, searcher = client
    started = searcher.start("exp-1", spec())
    events = [
        pb.SearcherEvent(trial_created=pb.TrialCreated(request_id=a.create.request_id))
        for a in started.actions
    ]
    assert len(events) == 4
    seq = 0
    calls = 0
    while seq < len(events):
        answer = searcher.handle_many("exp-1", seq, events[seq:])
        calls += 1
        seq = answer.snapshot.seq
    assert seq == 4
    assert calls == (1 if kind == "batches" else 4)


def test_only_cairns_own_searcher_is_taken_to_replay_exactly() -> None:
    """The pump stores a search's state every thousand events only where the searcher's sessions
    replay exactly (searcher_pump.py): the directory's built-in client; a custom searcher's, at the
    address its config names or as a plug-in, stores it with every answer."""
    directory = SearcherDirectory("127.0.0.1:1", None, {"mine": "127.0.0.1:2"})
    try:
        assert directory.for_config({"searcher": {"name": "random"}}).replays_exactly
        at_address = {"searcher": {"name": "custom", "address": "127.0.0.1:3"}}
        assert not directory.for_config(at_address).replays_exactly
        assert not directory.for_config({"searcher": {"name": "custom", "plugin": "mine"}}).replays_exactly
    finally:
        directory.shutdown()

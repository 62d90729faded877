"""The halving searches through the real searcher server over a real socket: a promotion run with
targets, a stopping decision, restore into a fresh server, preview, and refused specs."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2

from cairn.searcher.v1 import searcher_pb2 as pb
from cairn.searcher.v1 import searcher_pb2_grpc
from services.common.server import ServiceServer
from services.searcher.server import serve
from tests.unit.searcher.test_searcher_grpc import TIMEOUT_S, code_of, stub_for

HPARAMS = {"lr": {"type": "log", "minval": -4, "maxval": -1, "base": 10}, "global_batch_size": 32}


def struct(values: dict[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(values)
    return message


def halving(**searcher: Any) -> pb.SearchSpec:
    section = {
        "name": "async_halving",
        "metric": "loss",
        "smaller_is_better": True,
        "max_trials": 4,
        "time_metric": "batches",
        "max_time": 400,
        "divisor": 2,
        "num_rungs": 3,
        "max_concurrent_trials": 2,
        "stop_once": False,
        **searcher,
    }
    section = {key: value for key, value in section.items() if value is not None}
    return pb.SearchSpec(searcher=struct(section), hyperparameters=struct(HPARAMS), seed=5)


class Session:
    """One session seen from the master's side: sends events in order and keeps the latest answer."""

    def __init__(
        self, stub: searcher_pb2_grpc.SearcherServiceStub, session_id: str, spec: pb.SearchSpec
    ) -> None:
        self.stub, self.session_id = stub, session_id
        self.latest = stub.StartSession(
            pb.StartSessionRequest(session_id=session_id, spec=spec), timeout=TIMEOUT_S
        )
        self.seq = 0

    def send(self, **kind: Any) -> list[pb.SearcherAction]:
        request = pb.HandleEventRequest(
            session_id=self.session_id, after_seq=self.seq, event=pb.SearcherEvent(**kind)
        )
        self.latest = self.stub.HandleEvent(request, timeout=TIMEOUT_S)
        self.seq += 1
        return list(self.latest.actions)

    def validate(self, rid: str, loss: float, batches: int) -> list[pb.SearcherAction]:
        metrics = struct({"loss": loss, "batches": batches})
        return self.send(
            validation_completed=pb.ValidationCompleted(
                request_id=rid, metrics=metrics, steps_completed=batches
            )
        )


def test_promotion_run_over_the_wire() -> None:
    first = serve("127.0.0.1", 0, None)
    try:
        with stub_for(first) as stub:
            session = Session(stub, "exp-asha", halving())
            creates = [a.create for a in session.latest.actions]
            assert [c.target_length for c in creates] == [100, 100]
            assert session.latest.snapshot.method == "async_halving"
            t0, t1 = (c.request_id for c in creates)
            for rid in (t0, t1):
                assert session.send(trial_created=pb.TrialCreated(request_id=rid)) == []
            (third,) = session.validate(t0, 0.5, 100)
            assert third.WhichOneof("action") == "create" and third.create.target_length == 100
            session.send(trial_created=pb.TrialCreated(request_id=third.create.request_id))
            (promote,) = session.validate(t1, 0.3, 100)
            assert promote.set_target == pb.SetTrialTarget(request_id=t1, target_length=200)
            saved = session.latest
            event = pb.SearcherEvent(
                validation_completed=pb.ValidationCompleted(
                    request_id=third.create.request_id,
                    metrics=struct({"loss": 0.4, "batches": 100}),
                    steps_completed=100,
                )
            )
            expected = stub.HandleEvent(
                pb.HandleEventRequest(session_id="exp-asha", after_seq=session.seq, event=event),
                timeout=TIMEOUT_S,
            )
            assert [a.WhichOneof("action") for a in expected.actions] == ["create"]
    finally:
        first.stop(grace=0)

    # A fresh server restored from the saved snapshot answers the same event the same way.
    second = serve("127.0.0.1", 0, None)
    try:
        with stub_for(second) as stub:
            restored = stub.RestoreSession(
                pb.RestoreSessionRequest(session_id="exp-asha", spec=halving(), snapshot=saved.snapshot),
                timeout=TIMEOUT_S,
            )
            assert restored.progress == pytest.approx(saved.progress)
            again = stub.HandleEvent(
                pb.HandleEventRequest(session_id="exp-asha", after_seq=saved.snapshot.seq, event=event),
                timeout=TIMEOUT_S,
            )
            assert again == expected
    finally:
        second.stop(grace=0)


def test_stopping_adaptive_asha_and_preview_over_the_wire(searcher_server: ServiceServer) -> None:
    # One bracket of three rungs: 100, 200 and 400 batches.
    spec = halving(name="adaptive_asha", stop_once=True, bracket_rungs=[3], num_rungs=None)
    with stub_for(searcher_server) as stub:
        session = Session(stub, "exp-adaptive", spec)
        a, b = (action.create.request_id for action in session.latest.actions)
        # Each trial trains to its next rung and hears the verdict before it goes on.
        assert all(action.create.target_length == 100 for action in session.latest.actions)
        (goes_on,) = session.validate(a, 0.2, 100)
        assert goes_on.set_target.request_id == a and goes_on.set_target.target_length == 200
        stop, create = session.validate(b, 0.9, 100)
        assert stop.stop.request_id == b and create.WhichOneof("action") == "create"
        # A validation without the searcher metric changes nothing.
        metrics = struct({"accuracy": 0.5, "batches": 100})
        assert session.send(validation_completed=pb.ValidationCompleted(request_id=a, metrics=metrics)) == []

        preview = stub.PreviewSearch(pb.PreviewSearchRequest(spec=spec), timeout=TIMEOUT_S)
        assert preview.unit == "batches"
        assert len(preview.trials) == 4
        assert [t.request_id for t in preview.trials[:2]] == [a, b]
        assert all(list(t.lengths)[:1] == [100] and t.bracket == 0 for t in preview.trials)


def test_bad_halving_spec_is_invalid_argument(searcher_server: ServiceServer) -> None:
    with stub_for(searcher_server) as stub:
        for spec, message in [
            (halving(divisor=1), "searcher.divisor: must be > 1, got 1.0"),
            (
                halving(name="adaptive_asha", num_rungs=None, bracket_rungs=[9]),
                "searcher.bracket_rungs[0]: must be <= max_rungs (5), got 9",
            ),
        ]:
            code, details = code_of(
                lambda spec=spec: stub.StartSession(
                    pb.StartSessionRequest(session_id="bad", spec=spec), timeout=TIMEOUT_S
                )
            )
            assert code == grpc.StatusCode.INVALID_ARGUMENT
            assert details.startswith(message), details
            code, details = code_of(
                lambda spec=spec: stub.PreviewSearch(pb.PreviewSearchRequest(spec=spec), timeout=TIMEOUT_S)
            )
            assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith(message)

"""Plays the master's side of a search against the TPE searcher: specs as the master sends them,
one session with its sequence number, and the trials the searcher asked for."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from cairn.searcher.v1 import searcher_pb2 as pb
from cairn.searcher.v1 import searcher_pb2_grpc
from cairn.wire import python_to_struct, struct_to_python

CALL_TIMEOUT_S = 10.0
_session_numbers = itertools.count(1)

# One hyperparameter of every form, nested groups included.
ALL_FORMS: dict[str, Any] = {
    "learning_rate": {"type": "log", "minval": -4, "maxval": -1, "base": 10},
    "layers": {"type": "int", "minval": 1, "maxval": 8},
    "dropout": {"type": "double", "minval": 0.0, "maxval": 0.5},
    "optimizer": {
        "name": {"type": "categorical", "vals": ["sgd", "adam"]},
        "momentum": {"type": "const", "val": 0.9},
        "schedule": {"type": "categorical", "vals": [[1, 2], {"warmup": 3}, None]},
    },
    "global_batch_size": {"type": "const", "val": 64},
}


def tpe_spec(hparams: dict[str, Any] | None = None, seed: int = 7, **searcher: Any) -> pb.SearchSpec:
    section: dict[str, Any] = {
        "name": "custom",
        "address": "127.0.0.1:9100",
        "metric": "loss",
        "smaller_is_better": True,
        "max_trials": 6,
        **searcher,
    }
    section = {key: value for key, value in section.items() if value is not None}
    return pb.SearchSpec(
        searcher=python_to_struct(section),
        hyperparameters=python_to_struct(ALL_FORMS if hparams is None else hparams),
        seed=seed,
    )


def new_session_id() -> str:
    return f"experiment-{next(_session_numbers)}"


def creates(response: pb.SearcherResponse) -> list[pb.CreateTrial]:
    return [a.create for a in response.actions if a.WhichOneof("action") == "create"]


def shutdowns(response: pb.SearcherResponse) -> list[pb.Shutdown]:
    return [a.shutdown for a in response.actions if a.WhichOneof("action") == "shutdown"]


def hparams_of(create: pb.CreateTrial) -> dict[str, Any]:
    return struct_to_python(create.hparams)


def state_of(response: pb.SearcherResponse) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(response.snapshot.state)
    return loaded


def rpc_error(call: Callable[[], Any]) -> grpc.RpcError:
    try:
        call()
    except grpc.RpcError as exc:
        return exc
    raise AssertionError("the call succeeded; an error was expected")


@dataclass
class SearchDriver:
    stub: searcher_pb2_grpc.SearcherServiceStub
    spec: pb.SearchSpec
    session_id: str = field(default_factory=new_session_id)
    seq: int = 0
    last: pb.SearcherResponse | None = None
    # Every trial the searcher asked for, in order, and those not yet exited.
    created: list[pb.CreateTrial] = field(default_factory=list)
    open: list[pb.CreateTrial] = field(default_factory=list)
    shutdown: pb.Shutdown | None = None
    shutdown_count: int = 0

    def _take(self, response: pb.SearcherResponse) -> pb.SearcherResponse:
        self.last = response
        self.seq = response.snapshot.seq
        self.created.extend(creates(response))
        self.open.extend(creates(response))
        for stop in shutdowns(response):
            self.shutdown = stop
            self.shutdown_count += 1
        return response

    def start(self) -> pb.SearcherResponse:
        request = pb.StartSessionRequest(session_id=self.session_id, spec=self.spec)
        return self._take(self.stub.StartSession(request, timeout=CALL_TIMEOUT_S))

    def restore(self, snapshot: pb.Snapshot) -> pb.RestoreSessionResponse:
        request = pb.RestoreSessionRequest(session_id=self.session_id, spec=self.spec, snapshot=snapshot)
        response: pb.RestoreSessionResponse = self.stub.RestoreSession(request, timeout=CALL_TIMEOUT_S)
        self.seq = snapshot.seq
        return response

    def send(self, event: pb.SearcherEvent, after_seq: int | None = None) -> pb.SearcherResponse:
        request = pb.HandleEventRequest(
            session_id=self.session_id, after_seq=self.seq if after_seq is None else after_seq, event=event
        )
        return self._take(self.stub.HandleEvent(request, timeout=CALL_TIMEOUT_S))

    # --- events --------------------------------------------------------------------------------

    def trial_created(self, request_id: str) -> pb.SearcherResponse:
        return self.send(pb.SearcherEvent(trial_created=pb.TrialCreated(request_id=request_id)))

    def validated(self, request_id: str, metrics: dict[str, Any], steps: int = 100) -> pb.SearcherResponse:
        report = pb.ValidationCompleted(
            request_id=request_id, metrics=python_to_struct(metrics), steps_completed=steps
        )
        return self.send(pb.SearcherEvent(validation_completed=report))

    def exited_early(
        self, request_id: str, reason: pb.TrialExitedEarly.Reason.ValueType
    ) -> pb.SearcherResponse:
        early = pb.TrialExitedEarly(request_id=request_id, reason=reason)
        return self.send(pb.SearcherEvent(trial_exited_early=early))

    def exited(self, request_id: str) -> pb.SearcherResponse:
        self.open = [c for c in self.open if c.request_id != request_id]
        return self.send(pb.SearcherEvent(trial_exited=pb.TrialExited(request_id=request_id)))

    def run_trial(self, create: pb.CreateTrial, objective: Callable[[dict[str, Any]], float]) -> None:
        """The oldest open trial's whole life: created, one validation, exited."""
        metric = struct_to_python(self.spec.searcher)["metric"]
        self.trial_created(create.request_id)
        self.validated(create.request_id, {metric: objective(hparams_of(create)), "other": 0.5})
        self.exited(create.request_id)

    def run_to_shutdown(self, objective: Callable[[dict[str, Any]], float], max_trials: int = 200) -> None:
        for _ in range(max_trials):
            if not self.open:
                break
            self.run_trial(self.open[0], objective)
        assert self.shutdown is not None, "the search did not shut down"

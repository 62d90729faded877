from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import click
import grpc
import pytest

from cairn.api.v1 import auth_pb2, trial_pb2
from cairn.cli.errors import EXIT_INTERRUPTED, CliError, translate
from cairn.client.address import MasterAddress
from cairn.client.errors import CairnError, from_rpc_error, rpc_error_message
from cairn.client.session import Session

MASTER = "localhost:8090"


class StatusError(grpc.RpcError):
    """The two accessors the CLI reads from a failed call."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


@pytest.mark.parametrize(
    ("code", "details", "expected"),
    [
        (
            grpc.StatusCode.UNAVAILABLE,
            "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:8090: "
            "Connection refused",
            "cannot reach the master at localhost:8090 (is the cluster up? `cairn cluster up`)",
        ),
        (
            grpc.StatusCode.UNAVAILABLE,
            "",
            "cannot reach the master at localhost:8090 (is the cluster up? `cairn cluster up`)",
        ),
        (
            grpc.StatusCode.UNAVAILABLE,
            "the searcher is restarting",
            "the master at localhost:8090 is unavailable: the searcher is restarting",
        ),
        (
            grpc.StatusCode.UNAUTHENTICATED,
            "token missing",
            "not logged in or session expired: run `cairn user login`",
        ),
        (
            grpc.StatusCode.INVALID_ARGUMENT,
            "spec.searcher.max_trials: must be >= 1",
            "spec.searcher.max_trials: must be >= 1",
        ),
        (grpc.StatusCode.NOT_FOUND, "experiment 7 not found", "experiment 7 not found"),
        (
            grpc.StatusCode.FAILED_PRECONDITION,
            "experiment 7 is COMPLETED",
            "experiment 7 is COMPLETED",
        ),
        (grpc.StatusCode.PERMISSION_DENIED, "admin only", "permission denied: admin only"),
        (grpc.StatusCode.DEADLINE_EXCEEDED, "", "the master at localhost:8090 did not answer in time"),
        (grpc.StatusCode.INTERNAL, "boom", "the master failed (INTERNAL): boom"),
    ],
)
def test_status_codes_become_one_line(code: grpc.StatusCode, details: str, expected: str) -> None:
    assert rpc_error_message(StatusError(code, details), MASTER) == expected


def test_multi_line_server_messages_are_joined() -> None:
    error = StatusError(grpc.StatusCode.INVALID_ARGUMENT, "config is invalid:\n  a: bad\n  b: worse\n")
    message = rpc_error_message(error, MASTER)
    assert message == "config is invalid:; a: bad; b: worse"
    assert from_rpc_error(error, MASTER).code == grpc.StatusCode.INVALID_ARGUMENT


def test_cli_translation() -> None:
    rpc = translate(StatusError(grpc.StatusCode.NOT_FOUND, "no such trial"), MASTER)
    assert isinstance(rpc, CliError) and rpc.message == "no such trial" and rpc.exit_code == 1
    cairn = translate(CairnError("bad\nthing"), MASTER)
    assert isinstance(cairn, CliError) and cairn.message == "bad; thing"
    os_error = translate(FileNotFoundError(2, "No such file or directory", "exp.yaml"), MASTER)
    assert isinstance(os_error, CliError) and os_error.message == "exp.yaml: No such file or directory"
    interrupted = translate(KeyboardInterrupt(), MASTER)
    assert isinstance(interrupted, click.exceptions.Exit) and interrupted.exit_code == EXIT_INTERRUPTED
    assert translate(ValueError("a bug"), MASTER) is None


class _RecordMetadata(grpc.ServerInterceptor):
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, str]]] = []

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Any],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Any:
        metadata = {key: str(value) for key, value in handler_call_details.invocation_metadata or ()}
        self.calls.append((handler_call_details.method, metadata))
        return continuation(handler_call_details)


@pytest.fixture
def empty_server() -> Iterator[tuple[int, _RecordMetadata]]:
    """A real gRPC server with no services: every call is answered UNIMPLEMENTED, after its
    metadata has been recorded."""
    recorder = _RecordMetadata()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), interceptors=[recorder])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield port, recorder
    server.stop(0)


def test_session_sends_bearer_token_on_unary_and_stream_calls(
    empty_server: tuple[int, _RecordMetadata],
) -> None:
    port, recorder = empty_server
    with Session(MasterAddress("127.0.0.1", port), "tok-123") as session:
        with pytest.raises(grpc.RpcError) as unary:
            session.api.GetMe(auth_pb2.GetMeRequest())
        with pytest.raises(grpc.RpcError):
            list(session.api.TrialLogs(trial_pb2.TrialLogsRequest(trial_id=1)))
    assert unary.value.code() == grpc.StatusCode.UNIMPLEMENTED
    methods = [method for method, _ in recorder.calls]
    assert methods == ["/cairn.api.v1.Cairn/GetMe", "/cairn.api.v1.Cairn/TrialLogs"]
    assert all(metadata.get("authorization") == "Bearer tok-123" for _, metadata in recorder.calls)


def test_session_without_token_sends_no_authorization(empty_server: tuple[int, _RecordMetadata]) -> None:
    port, recorder = empty_server
    with Session(MasterAddress("127.0.0.1", port)) as session, pytest.raises(grpc.RpcError):
        session.api.GetMe(auth_pb2.GetMeRequest())
    assert "authorization" not in recorder.calls[0][1]

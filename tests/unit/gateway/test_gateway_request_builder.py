"""Requests from HTTP: path variables, query strings (grpc-gateway v1's rules), JSON bodies."""

from __future__ import annotations

import base64
import json

import pytest
from google.protobuf import json_format

from cairn.api.v1 import api_pb2, checkpoint_pb2, experiment_pb2, trial_pb2
from services.master.gateway.errors import GatewayError
from services.master.gateway.http_rules import HttpBinding, http_bindings
from services.master.gateway.request_builder import LONG_STRING_CHARS, RequestBuilder

CAIRN = api_pb2.DESCRIPTOR.services_by_name["Cairn"]
BINDINGS = {b.rpc.name: b for b in http_bindings(CAIRN)}


def build(rpc: str, path: dict[str, str] | None = None, query: str = "", body: bytes = b"") -> object:
    from urllib.parse import parse_qsl

    builder = RequestBuilder(BINDINGS[rpc])
    return builder.build(path or {}, parse_qsl(query, keep_blank_values=True), body)


def test_query_repeated_enums_bools_and_names_in_either_case() -> None:
    request = build(
        "GetExperiments",
        query="states=STATE_ACTIVE&states=2&order_by=ORDER_BY_DESC&sortBy=SORT_BY_NAME&limit=-1"
        "&archived=false&labels=a&labels=b%20c&userIds=4&user_ids=5&showTrialData=t&name=x+y",
    )
    assert isinstance(request, experiment_pb2.GetExperimentsRequest)
    assert list(request.states) == [
        experiment_pb2.Experiment.STATE_ACTIVE,
        experiment_pb2.Experiment.STATE_PAUSED,
    ]
    assert request.order_by == 2 and request.sort_by == experiment_pb2.GetExperimentsRequest.SORT_BY_NAME
    assert request.limit == -1
    assert request.HasField("archived") and request.archived is False
    assert list(request.labels) == ["a", "b c"] and request.name == "x y"
    assert list(request.user_ids) == [4, 5] and request.show_trial_data is True


def test_query_timestamps_and_unknown_keys() -> None:
    request = build(
        "TrialLogs",
        path={"trial_id": "9"},
        query="timestampAfter=2024-05-01T10:00:00.5Z&timestamp_before=2024-05-02T00:00:00%2B02:00"
        "&levels=LOG_LEVEL_ERROR&rankIds=0&rank_ids=1&follow=true&nonsense=1&pretty",
    )
    assert isinstance(request, trial_pb2.TrialLogsRequest)
    assert request.trial_id == 9 and request.follow
    assert request.timestamp_after.ToJsonString() == "2024-05-01T10:00:00.500Z"
    assert request.timestamp_before.ToJsonString() == "2024-05-01T22:00:00Z"
    assert list(request.levels) == [trial_pb2.LOG_LEVEL_ERROR] and list(request.rank_ids) == [0, 1]


def test_path_variables_win_over_the_body_and_nested_paths_merge() -> None:
    body = json.dumps({"metrics": {"trialId": 99, "trialRunId": 2, "stepsCompleted": 5}, "group": "training"})
    request = build("ReportTrialMetrics", path={"metrics.trial_id": "3"}, body=body.encode())
    assert isinstance(request, trial_pb2.ReportTrialMetricsRequest)
    assert (request.metrics.trial_id, request.metrics.trial_run_id, request.metrics.steps_completed) == (
        3,
        2,
        5,
    )
    assert request.group == "training"


def test_body_star_ignores_the_query_and_takes_original_names_too() -> None:
    files = [
        {"path": "a.py", "type": 48, "content": base64.b64encode(b"x=1").decode(), "mtime": "17", "mode": 420}
    ]
    body = json.dumps({"config": "name: x", "model_definition": files, "validateOnly": True, "unknown": 1})
    request = build("CreateExperiment", query="config=ignored", body=body.encode())
    assert isinstance(request, experiment_pb2.CreateExperimentRequest)
    assert request.config == "name: x" and request.validate_only
    assert request.model_definition[0].content == b"x=1" and request.model_definition[0].mtime == 17


def test_body_field_goes_into_that_field() -> None:
    request = build(
        "ReportTrialSearcherEarlyExit", path={"trial_id": "4"}, body=b'{"reason": "EXITED_REASON_INVALID_HP"}'
    )
    assert isinstance(request, trial_pb2.ReportTrialSearcherEarlyExitRequest)
    assert (
        request.trial_id == 4
        and request.early_exit.reason == trial_pb2.TrialEarlyExit.EXITED_REASON_INVALID_HP
    )


def test_long_strings_are_set_as_given_without_protobufs_surrogate_scan() -> None:
    # orjson already refused unpaired surrogates; long strings skip ParseDict's second look, which
    # took over 5 s of GIL for a 100 MB config. What the message holds is the same either way.
    config = "name: x\n# " + "é😀" * LONG_STRING_CHARS
    body = {"config": config, "modelDefinition": [], "activate": True}
    request = build("CreateExperiment", body=json.dumps(body).encode())
    assert isinstance(request, experiment_pb2.CreateExperimentRequest)
    assert request.config == config and request.activate

    # A body field that is a message, and one that is a string.
    task = "t" * LONG_STRING_CHARS
    checkpoint = build("ReportCheckpoint", body=json.dumps({"taskId": task, "uuid": "u"}).encode())
    assert isinstance(checkpoint, checkpoint_pb2.ReportCheckpointRequest)
    assert checkpoint.checkpoint.task_id == task and checkpoint.checkpoint.uuid == "u"
    long_password = json.dumps("p" * LONG_STRING_CHARS).encode()
    password = build("SetUserPassword", path={"user_id": "3"}, body=long_password)
    assert password.user_id == 3 and password.password == "p" * LONG_STRING_CHARS  # type: ignore[attr-defined]


def test_long_strings_keep_protobufs_refusals() -> None:
    long = "x" * LONG_STRING_CHARS
    # Named twice (proto name and JSON name): left to ParseDict, which decides as it always did.
    twice = {"config_text": long, "configText": "y" * LONG_STRING_CHARS}
    expected = json_format.ParseDict(twice, experiment_pb2.PreviewHPSearchRequest())
    assert build("PreviewHPSearch", body=json.dumps(twice).encode()) == expected
    # A long string for a field of another type is still refused by name.
    with pytest.raises(GatewayError) as info:
        build("CreateExperiment", body=json.dumps({"activate": long}).encode())
    assert info.value.status == 400 and "activate" in info.value.message
    # And an unpaired surrogate never gets this far.
    with pytest.raises(GatewayError) as info:
        build("CreateExperiment", body=b'{"config": "\\ud800' + long.encode() + b'"}')
    assert info.value.status == 400 and "not valid JSON" in info.value.message


def test_an_empty_body_is_an_empty_request() -> None:
    request = build("PreviewHPSearch", body=b"  ")
    assert request == experiment_pb2.PreviewHPSearchRequest()


@pytest.mark.parametrize(
    ("rpc", "path", "query", "body", "names"),
    [
        ("GetExperiment", {"experiment_id": "abc"}, "", b"", "experiment_id"),
        ("GetExperiment", {"experiment_id": "99999999999"}, "", b"", "experiment_id"),
        ("GetExperiments", {}, "limit=1.5", b"", "limit"),
        ("GetExperiments", {}, "states=STATE_NOPE", b"", "states"),
        ("GetExperiments", {}, "states=77", b"", "states"),
        ("GetExperiments", {}, "archived=maybe", b"", "archived"),
        ("GetExperiments", {}, "limit=1&limit=2", b"", "limit"),
        ("TrialLogs", {"trial_id": "1"}, "timestampAfter=yesterday", b"", "timestampAfter"),
        ("CreateExperiment", {}, "", b"{not json", "not valid JSON"),
        ("CreateExperiment", {}, "", b"[1, 2]", "JSON object"),
        ("CreateExperiment", {}, "", b'{"activate": "yes"}', "activate"),
        ("CreateExperiment", {}, "", b'{"modelDefinition": [{"mtime": "x"}]}', "mtime"),
    ],
)
def test_malformed_input_names_the_field(
    rpc: str, path: dict[str, str], query: str, body: bytes, names: str
) -> None:
    with pytest.raises(GatewayError) as info:
        build(rpc, path=path, query=query, body=body)
    assert info.value.status == 400 and names in info.value.message


def test_a_path_variable_must_name_a_scalar_field() -> None:
    binding = BINDINGS["GetTrial"]
    with pytest.raises(ValueError, match="not a scalar"):
        RequestBuilder(HttpBinding("GET", "/x/{nope}", "", "", binding.rpc))

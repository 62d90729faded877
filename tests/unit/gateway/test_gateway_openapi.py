"""The OpenAPI document: valid OpenAPI 3.0, one operation per http rule, schemas as the gateway
writes JSON."""

from __future__ import annotations

import re
from typing import Any

import pytest
from openapi_spec_validator import validate

from cairn.api.v1 import api_pb2
from cairn.gateway.v1 import gateway_pb2
from services.master.gateway.http_rules import http_bindings
from services.master.gateway.openapi import openapi_document, openapi_path

CAIRN = api_pb2.DESCRIPTOR.services_by_name["Cairn"]


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return openapi_document(CAIRN, http_bindings(CAIRN))


def test_the_document_is_valid_openapi(document: dict[str, Any]) -> None:
    validate(document)


def test_every_binding_is_an_operation(document: dict[str, Any]) -> None:
    bindings = http_bindings(CAIRN)
    operations = {(path, verb) for path, ops in document["paths"].items() for verb in ops}
    # OpenAPI path parameters cannot hold dots: {metrics.trial_id} is written {metrics_trial_id}.
    assert operations == {
        (re.sub(r"\{[^}]*\}", lambda m: m.group(0).replace(".", "_"), b.template), b.http_method.lower())
        for b in bindings
    }
    ids = [op["operationId"] for ops in document["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids))


def test_parameters_follow_the_http_rules(document: dict[str, Any]) -> None:
    listing = document["paths"]["/api/v1/experiments"]["get"]
    params = {p["name"]: p for p in listing["parameters"]}
    assert params["states"]["schema"] == {
        "type": "array",
        "items": {"$ref": "#/components/schemas/v1ExperimentState"},
    }
    assert params["states"]["explode"] is True and params["orderBy"]["in"] == "query"
    assert params["archived"]["schema"]["nullable"] is True  # proto3 optional
    report = document["paths"]["/api/v1/trials/{metrics_trial_id}/metrics"]["post"]
    assert [p["name"] for p in report["parameters"]] == ["metrics_trial_id"]
    assert report["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/v1ReportTrialMetricsRequest"
    }
    early_exit = document["paths"]["/api/v1/trials/{trial_id}/early_exit"]["post"]
    assert early_exit["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "v1TrialEarlyExit"
    )


def test_schemas_match_the_json_the_gateway_writes(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    experiment = schemas["v1Experiment"]["properties"]
    assert (
        experiment["checkpointSize"]["type"] == "string" and experiment["checkpointSize"]["format"] == "int64"
    )
    assert experiment["config"]["type"] == "object" and experiment["config"]["additionalProperties"] is True
    # A message field prints null while unset (Determined's gateway), so the schema says nullable.
    assert experiment["startTime"] == {"type": "string", "format": "date-time", "nullable": True}
    assert experiment["forkedFrom"]["nullable"] is True
    assert (
        schemas["v1ExperimentState"]["type"] == "string"
        and "STATE_ACTIVE" in schemas["v1ExperimentState"]["enum"]
    )
    assert experiment["state"] == {"$ref": "#/components/schemas/v1ExperimentState"}


def test_streams_errors_and_security(document: dict[str, Any]) -> None:
    logs = document["paths"]["/api/v1/trials/{trial_id}/logs"]["get"]
    line = logs["responses"]["200"]["content"]["application/json"]["schema"]
    assert line["properties"]["result"] == {"$ref": "#/components/schemas/v1TrialLogsResponse"}
    assert line["properties"]["error"] == {"$ref": "#/components/schemas/runtimeStreamError"}
    for status in ("400", "401", "403", "404", "409", "500", "503", "504"):
        assert logs["responses"][status]["content"]["application/json"]["schema"]["$ref"].endswith(
            "runtimeError"
        )
    assert document["components"]["securitySchemes"]["BearerToken"] == {
        "type": "http",
        "scheme": "bearer",
        "description": document["components"]["securitySchemes"]["BearerToken"]["description"],
    }
    assert document["paths"]["/api/v1/auth/login"]["post"]["security"] == []
    assert document["paths"]["/api/v1/master"]["get"]["security"] == []
    assert "security" not in logs  # the document-wide bearer/cookie requirement applies


def test_descriptions_come_from_the_proto_comments() -> None:
    comments = {
        "cairn.api.v1.TrialLogsRequest.follow": "Keep streaming.",
        "cairn.api.v1.Cairn.TrialLogs": "Logs.",
    }
    document = openapi_document(CAIRN, http_bindings(CAIRN), comments)
    logs = document["paths"]["/api/v1/trials/{trial_id}/logs"]["get"]
    assert logs["description"] == "Logs."
    assert {p["name"]: p.get("description") for p in logs["parameters"]}["follow"] == "Keep streaming."


def test_openapi_paths_name_variables_without_dots() -> None:
    assert openapi_path("/v1/{a.b}/x/{c=projects/*}:go") == "/v1/{a_b}/x/{c}:go"


def test_the_internal_gateway_service_is_no_public_route(document: dict[str, Any]) -> None:
    # The master's contract with its HTTP worker processes has no http rules: no REST route, no
    # OpenAPI operation, and none of its messages in the document.
    internal = gateway_pb2.DESCRIPTOR.services_by_name["GatewayService"]
    assert http_bindings(internal) == []
    text = str(document)
    for name in ("GatewayService", "ResolveProxy", "ProxyTarget", "sessionToken", "serviceCredential"):
        assert name not in text
    assert all(not path.startswith("/proxy") for path in document["paths"])

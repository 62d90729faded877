"""Path templates and routing: variables, nesting, most specific first, 404 and 405."""

from __future__ import annotations

import dataclasses

import pytest

from cairn.api.v1 import api_pb2
from services.master.gateway.http_rules import HttpBinding, http_bindings, rpc_method
from services.master.gateway.path_template import TemplateError, parse_template
from services.master.gateway.router import MethodNotAllowed, NoRoute, Router

CAIRN = api_pb2.DESCRIPTOR.services_by_name["Cairn"]


@pytest.fixture(scope="module")
def router() -> Router:
    return Router(http_bindings(CAIRN))


def test_every_rpc_of_the_service_has_a_route(router: Router) -> None:
    routed = {r.binding.rpc.name for r in router.routes}
    assert routed == {m.name for m in CAIRN.methods}


@pytest.mark.parametrize(
    ("method", "path", "rpc", "params"),
    [
        ("GET", "/api/v1/master", "GetMaster", {}),
        ("GET", "/api/v1/experiments/12", "GetExperiment", {"experiment_id": "12"}),
        ("POST", "/api/v1/experiments/12/pause", "PauseExperiment", {"id": "12"}),
        ("DELETE", "/api/v1/experiments/12", "DeleteExperiment", {"experiment_id": "12"}),
        ("GET", "/api/v1/trials/metrics/trial_metrics", "GetMetrics", {}),
        ("GET", "/api/v1/trials/3", "GetTrial", {"trial_id": "3"}),
        ("GET", "/api/v1/trials/3/logs", "TrialLogs", {"trial_id": "3"}),
        ("POST", "/api/v1/trials/3/metrics", "ReportTrialMetrics", {"metrics.trial_id": "3"}),
        ("POST", "/api/v1/trials/3/metrics/batch", "ReportTrialMetricsBatch", {"trial_id": "3"}),
        ("GET", "/api/v1/agents/a%2Fb/slots/0", "GetSlot", {"agent_id": "a/b", "slot_id": "0"}),
        ("GET", "/api/v1/checkpoints/0f%20x/download", "DownloadCheckpoint", {"checkpoint_uuid": "0f x"}),
        ("PATCH", "/api/v1/checkpoints", "PatchCheckpoints", {}),
    ],
)
def test_routes_match_with_their_variables(
    router: Router, method: str, path: str, rpc: str, params: dict[str, str]
) -> None:
    match = router.match(method, path)
    assert (match.binding.rpc.name, match.path_params) == (rpc, params)


def test_literal_segments_win_over_variables() -> None:
    rpc = rpc_method(CAIRN.methods_by_name["GetMaster"])
    variable = HttpBinding(
        "GET", "/x/{trial_id}/{group}", "", "", dataclasses.replace(rpc, name="ByVariable")
    )
    literal = HttpBinding("GET", "/x/metrics/{group}", "", "", dataclasses.replace(rpc, name="ByLiteral"))
    deep = HttpBinding("GET", "/x/{name=**}", "", "", dataclasses.replace(rpc, name="Deep"))
    for order in ([variable, literal, deep], [deep, literal, variable]):
        router = Router(order)
        assert router.match("GET", "/x/metrics/training").binding.rpc.name == "ByLiteral"
        assert router.match("GET", "/x/7/training").binding.rpc.name == "ByVariable"
        deep_match = router.match("GET", "/x/a/b/c")
        assert (deep_match.binding.rpc.name, deep_match.path_params) == ("Deep", {"name": "a/b/c"})


def test_unknown_paths_and_wrong_methods(router: Router) -> None:
    with pytest.raises(NoRoute):
        router.match("GET", "/api/v1/nothing/here")
    with pytest.raises(NoRoute):
        router.match("GET", "/api/v1/experiments/")  # an empty segment binds no variable
    with pytest.raises(MethodNotAllowed) as info:
        router.match("PUT", "/api/v1/experiments/3")
    assert sorted(info.value.allowed) == ["DELETE", "GET", "PATCH"]


def test_the_same_route_twice_is_refused() -> None:
    rpc = rpc_method(CAIRN.methods_by_name["GetMaster"])
    with pytest.raises(ValueError, match="both bind"):
        Router([HttpBinding("GET", "/a/{x}", "", "", rpc), HttpBinding("GET", "/a/{y}", "", "", rpc)])


def test_template_parsing() -> None:
    template = parse_template("/v1/{parent=projects/*}/books/{book.id}:publish")
    assert template.variables == ("parent", "book.id")
    assert template.match("/v1/projects/p1/books/9:publish") == {"parent": "projects/p1", "book.id": "9"}
    assert template.match("/v1/projects/p1/books/9") is None
    for bad in ("no-slash", "/a/{b", "/a/{1x}", "/a/{x}/{x}", "/a/b*c"):
        with pytest.raises(TemplateError):
            parse_template(bad)

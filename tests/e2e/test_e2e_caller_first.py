"""Every route establishes who is calling before it looks at the request (issue 44, item 6): a
request the REST gateway cannot build (a body that is not JSON, a query string past its bound) is
answered 401 without credentials and, with them, 403 where the caller may not make the call at all
(the access gate, before the body) and 400 elsewhere, on every route of the route table, so a new
route cannot forget it; the public ones (Login, GetMaster) answer 400 either way. And no hostile
body draws a 5xx: a metric batch that claims to follow reports never sent to a running trial's run
(schemathesis found it answered 503, with an odd unicode body) is a conflict (409), which the Core
API retries, not the master's failure."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import requests

from cairn.api.v1 import api_pb2, experiment_pb2
from services.master.domain.identity import roles
from services.master.domain.identity.rpc_decisions import DECISIONS, Kind
from services.master.gateway.http_rules import HttpBinding, http_bindings
from services.master.gateway.request_builder import MAX_QUERY_PARAMS
from services.master.servicers.auth import API, PUBLIC_METHODS
from tests.e2e.test_e2e_rest import TIMEOUT, base_url, rest_login
from tests.support.cluster import TestCluster, running_cluster

BINDINGS = http_bindings(api_pb2.DESCRIPTOR.services_by_name["Cairn"])
# Past the gateway's bound on query parameters: refused whatever the route.
TOO_MANY_PARAMS = "&".join(f"p{i}=1" for i in range(MAX_QUERY_PARAMS + 1))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestCluster]:
    state_dir = tmp_path_factory.mktemp("caller-first") / "cluster"
    with running_cluster(state_dir, None, agents=0) as c:
        yield c


def _bad_request(base: str, binding: HttpBinding, headers: dict[str, str]) -> requests.Response:
    """`binding`'s route with a request the gateway cannot build: a broken JSON body where the route
    takes one, too many query parameters where it does not."""
    path = re.sub(r"\{[^}]*\}", "1", binding.template)
    if binding.body:
        return requests.request(
            binding.http_method,
            base + path,
            data=b'{"oops": \xff',
            headers={**headers, "Content-Type": "application/json"},
            timeout=TIMEOUT,
        )
    return requests.request(
        binding.http_method, f"{base}{path}?{TOO_MANY_PARAMS}", headers=headers, timeout=TIMEOUT
    )


def _answers(base: str, headers: dict[str, str]) -> dict[str, tuple[int, str]]:
    answers = {}
    for binding in BINDINGS:
        response = _bad_request(base, binding, headers)
        body: Any = response.json()
        answers[f"{binding.http_method} {binding.template}"] = (
            response.status_code,
            str(body["error"]["error"]),
        )
    return answers


def _public(template: str) -> bool:
    return any(
        API + b.rpc.name in PUBLIC_METHODS for b in BINDINGS if f"{b.http_method} {b.template}" == template
    )


def test_every_route_refuses_a_caller_without_credentials_before_its_request(cluster: TestCluster) -> None:
    base = base_url(cluster)
    assert len(BINDINGS) > 150
    for headers in ({}, {"Authorization": "Bearer not-a-token"}):
        answers = _answers(base, headers)
        wrong = {
            route: answer
            for route, answer in answers.items()
            if answer[0] != (400 if _public(route) else 401)
        }
        assert not wrong, f"{len(wrong)} routes looked at the request before the caller: {wrong}"


def _gate_refuses_a_new_user(rpc: str) -> bool:
    """Whether the access gate (identity/access.check_call) refuses a new user this call before
    its request is looked at: trial code's own calls, and calls taking a workspace permission the
    default roles (the group everyone: Editor and WorkspaceCreator) hold nowhere."""
    decision = DECISIONS[rpc]
    held = roles.EDITOR.permissions | roles.WORKSPACE_CREATOR.permissions
    if decision.kind is Kind.TRIAL_CODE:
        return True
    return decision.kind is Kind.WORKSPACE and decision.permission not in held


def test_every_route_names_what_is_wrong_with_the_request_of_a_known_caller(cluster: TestCluster) -> None:
    """Once the caller is known, and may make the call at all (the access gate: else 403 naming
    the permission), a request that cannot be built is answered 400 saying what is wrong."""
    base = base_url(cluster)
    token = rest_login(base).json()["token"]
    answers = _answers(base, {"Authorization": f"Bearer {token}"})
    gated = {f"{b.http_method} {b.template}" for b in BINDINGS if _gate_refuses_a_new_user(b.rpc.name)}
    assert gated, "the default roles leave some calls to others (DeleteWorkspace, AssignRoles, trial code's)"
    wrong = {
        route: answer
        for route, answer in answers.items()
        if (
            route in gated
            and (answer[0] != 403 or not re.search("may not call|only an allocation", answer[1]))
        )
        or (
            route not in gated
            and (
                answer[0] != 400
                or not re.search("not valid JSON|more than .* query parameters|bad query", answer[1])
            )
        )
    }
    assert not wrong, f"{len(wrong)} routes did not say what was wrong: {wrong}"


def test_a_grpc_request_that_cannot_be_decoded_is_refused_after_its_caller(cluster: TestCluster) -> None:
    """gRPC's own edge likewise: a request that is not valid protobuf text meets the credentials
    check first."""
    raw = experiment_pb2.CreateExperimentRequest(config="x").SerializeToString().replace(b"x", b"\xff")
    call = cluster.channel.unary_unary(
        "/cairn.api.v1.Cairn/CreateExperiment",
        request_serializer=lambda data: data,
        response_deserializer=experiment_pb2.CreateExperimentResponse.FromString,
    )
    token = rest_login(base_url(cluster)).json()["token"]
    for metadata, code, details in (
        ((), grpc.StatusCode.UNAUTHENTICATED, "missing credentials"),
        ((("authorization", "Bearer not-a-token"),), grpc.StatusCode.UNAUTHENTICATED, "invalid credentials"),
        (
            (("authorization", f"Bearer {token}"),),
            grpc.StatusCode.INVALID_ARGUMENT,
            "config: not valid UTF-8",
        ),
    ):
        with pytest.raises(grpc.RpcError) as refused:
            call(raw, metadata=metadata, timeout=30)
        assert refused.value.code() == code and details in str(refused.value.details())


def test_a_batch_following_reports_never_sent_is_a_conflict_not_a_server_error(
    cluster: TestCluster, tmp_path: Path
) -> None:
    base = base_url(cluster)
    session = requests.Session()
    session.headers["Authorization"] = "Bearer " + rest_login(base, session, username="admin").json()["token"]
    config = (
        "name: hostile\nsearcher: {name: single, metric: loss}\n"
        "checkpoint_storage: {type: shared_fs, host_path: /tmp}\n"
    )
    created = session.post(
        f"{base}/api/v1/experiments",
        json={"config": config, "unmanaged": True, "activate": True},
        timeout=TIMEOUT,
    )
    assert created.status_code == 200, created.text
    experiment_id = created.json()["experiment"]["id"]
    trial = session.post(
        f"{base}/api/v1/trials", json={"experimentId": experiment_id, "unmanaged": True}, timeout=TIMEOUT
    )
    assert trial.status_code == 200, trial.text
    trial_id = trial.json()["trial"]["id"]
    run = session.post(f"{base}/api/v1/trials/{trial_id}/start", json={"trialId": trial_id}, timeout=TIMEOUT)
    assert run.status_code == 200, run.text
    run_id = run.json()["trialRunId"]

    # Odd unicode in the group and the metric's name (no-break space, a mathematical letter outside
    # the basic plane, a line separator, a right-to-left mark, a dotted capital, a ligature).
    report = {
        "seq": 8,
        "group": "\u00a0\U0001d558\u2028\u200f",
        "stepsCompleted": 1,
        "metrics": {"\u0130\ufb01": 1},
    }
    hostile = json.dumps(
        {"trialId": trial_id, "trialRunId": run_id, "afterSeq": 7, "reports": [report]}
    ).encode()
    answer = session.post(
        f"{base}/api/v1/trials/{trial_id}/metrics/batch",
        data=hostile,
        headers={"Content-Type": "application/json"},
        timeout=TIMEOUT,
    )
    assert answer.status_code == 409, answer.text
    assert "reports up to seq 7 are not stored yet" in answer.json()["error"]["error"]
    # In order, the same reports are stored.
    first = session.post(
        f"{base}/api/v1/trials/{trial_id}/metrics/batch",
        json={
            "trialId": trial_id,
            "trialRunId": run_id,
            "reports": [{"seq": 7, "group": "training", "stepsCompleted": 1, "metrics": {"loss": 1}}],
        },
        timeout=TIMEOUT,
    )
    assert first.status_code == 200 and first.json()["stored"] == 1, first.text
    again = session.post(
        f"{base}/api/v1/trials/{trial_id}/metrics/batch",
        data=hostile,
        headers={"Content-Type": "application/json"},
        timeout=TIMEOUT,
    )
    assert again.status_code == 200 and again.json()["stored"] == 1, again.text

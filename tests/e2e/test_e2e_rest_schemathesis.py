"""Property-based tests of the REST API against its own OpenAPI document (schemathesis), on a real
cluster with data in it: no answer may be a server error, and every answer must keep to the
document (documented status, content type, body schema; for streams, every NDJSON line).

Random ids almost never exist, so half of the positive examples have their path parameters
replaced by ids of a finished experiment (its trial, allocation, checkpoint, the agent): those
reach the servicers' real work, not just their "not found".

Bounded: a fixed number of positive and negative examples per operation, no shrinking, a
timeout per request (about half a minute per database). Left out, and why:
- Logout: it ends the session the run is authenticated with (tests/e2e/test_e2e_rest.py covers it);
- WatchAllocationSignals: a watch on a live allocation streams until the allocation ends;
- MasterLogs: with `follow` it streams until the master stops (tests/e2e/test_e2e_master_continue.py
  covers it, followed and not);
- the `negative_data_rejection` check: the gateway accepts grpc-gateway's lenient spellings on
  purpose (bools as 1/0/t/f, enums by number, 64-bit integers as JSON numbers, unknown query
  keys), which that check counts as accepting invalid input; negative examples still must not
  cause a server error or an undocumented answer;
- the `positive_data_acceptance` check: a schema-valid body is often semantically invalid (an
  experiment config is YAML text), and a 400 for it is the right answer.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.core.result import Ok
from schemathesis.core.transport import Response
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.e2e.test_e2e_rest import TIMEOUT, base_url, create_experiment, rest_login
from tests.support.cluster import TestCluster
from tests.support.polling import wait_for

EXCLUDED_OPERATIONS = {"Logout", "WatchAllocationSignals", "MasterLogs"}
POSITIVE_EXAMPLES = 20
NEGATIVE_EXAMPLES = 10
REQUEST_TIMEOUT_S = 30
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


def _line_responses(response: Response) -> list[Response]:
    """A stream's answer as one response per NDJSON line, each checked against the line schema."""
    return [
        Response(
            status_code=response.status_code,
            headers=response.headers,
            content=line,
            request=response.request,
            elapsed=response.elapsed,
            verify=response.verify,
            message=response.message,
            http_version=response.http_version,
            encoding=response.encoding,
        )
        for line in response.content.splitlines()
        if line.strip()
    ]


def _seed_ids(session: requests.Session, base: str, experiment_id: int) -> dict[str, Any]:
    """Path parameter name → an id that exists in the cluster."""
    trial = session.get(f"{base}/api/v1/experiments/{experiment_id}/trials", timeout=TIMEOUT).json()[
        "trials"
    ][0]
    checkpoints = session.get(f"{base}/api/v1/trials/{trial['id']}/checkpoints", timeout=TIMEOUT).json()
    agent = session.get(f"{base}/api/v1/agents", timeout=TIMEOUT).json()["agents"][0]
    return {
        "experiment_id": experiment_id,
        "trial_id": trial["id"],
        "metrics_trial_id": trial["id"],
        "id": experiment_id,  # experiments/{id} and trials/{id}: both 1 in a fresh cluster
        "allocation_id": trial["allocationId"],
        "checkpoint_uuid": checkpoints["checkpoints"][0]["uuid"],
        "agent_id": agent["id"],
        "slot_id": sorted(agent["slots"])[0],
    }


def _run_operation(
    operation: Any, base: str, session: requests.Session, streaming: bool, seeds: dict[str, Any]
) -> list[str]:
    failures: list[str] = []

    def exercise(case: Any, use_seeds: bool) -> None:
        if use_seeds and case.path_parameters:
            case.path_parameters = {k: seeds.get(k, v) for k, v in case.path_parameters.items()}
        response = case.call(base_url=base, session=session, timeout=REQUEST_TIMEOUT_S)
        checked = _line_responses(response) if streaming and response.status_code == 200 else [response]
        for one in checked:
            try:
                case.validate_response(one, checks=CHECKS)
            except FailureGroup as exc:  # schemathesis' own report: what broke, and a curl to repeat it
                failures.append(f"{operation.label}: {exc}")
                return

    for mode, examples in (
        (schemathesis.GenerationMode.POSITIVE, POSITIVE_EXAMPLES),
        (schemathesis.GenerationMode.NEGATIVE, NEGATIVE_EXAMPLES),
    ):
        seeded = st.booleans() if mode == schemathesis.GenerationMode.POSITIVE else st.just(False)

        @settings(
            max_examples=examples,
            deadline=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
            database=None,
            derandomize=True,
        )
        @given(case=operation.as_strategy(generation_mode=mode), use_seeds=seeded)
        def run(case: Any, use_seeds: bool) -> None:
            exercise(case, use_seeds)

        try:
            run()
        except Unsatisfiable:
            pass  # no negative example exists (e.g. an operation without parameters)
        except Exception as exc:
            failures.append(f"{operation.label} ({mode.name}): {type(exc).__name__}: {exc}")
    return failures


def test_rest_api_keeps_to_its_openapi_document(cluster: TestCluster, trial_dir: Path) -> None:
    base = base_url(cluster)
    session = requests.Session()
    token = rest_login(base, session, username="admin").json()["token"]
    session.headers["Authorization"] = f"Bearer {token}"
    experiment_id = create_experiment(session, base, trial_dir)

    def state() -> str:
        response = session.get(f"{base}/api/v1/experiments/{experiment_id}", timeout=TIMEOUT)
        return str(response.json()["experiment"]["state"])

    wait_for(lambda: state() == "STATE_COMPLETED", timeout=120, what="the seed experiment to complete")
    seeds = _seed_ids(session, base, experiment_id)

    schema = schemathesis.openapi.from_url(f"{base}/api/v1/openapi.json", timeout=30)
    started = time.monotonic()
    failures: list[str] = []
    exercised = 0
    operations = []
    for result in schema.get_all_operations():
        # An operation schemathesis cannot read is a broken document: fail with its reason.
        assert isinstance(result, Ok), f"unusable operation in the OpenAPI document: {result.err()}"
        operations.append(result.ok())
    # Deletions last: a seeded DeleteExperiment would leave nothing for the others to find.
    operations.sort(key=lambda op: op.method.upper() == "DELETE")
    for operation in operations:
        operation_id = operation.definition.raw["operationId"]
        if operation_id in EXCLUDED_OPERATIONS:
            continue
        ok_content = operation.definition.raw["responses"]["200"]["content"]
        # An answer of raw bytes (the accounting CSV files) documents no JSON schema.
        ok_schema = ok_content.get("application/json", {}).get("schema", {})
        streaming = str(ok_schema.get("title", "")).startswith("Stream result of")
        failures.extend(_run_operation(operation, base, session, streaming, seeds))
        exercised += 1
    elapsed = time.monotonic() - started
    assert exercised >= 40, f"only {exercised} operations exercised"
    assert not failures, f"{len(failures)} operations broke the document ({elapsed:.0f}s):\n\n" + "\n\n".join(
        failures
    )
    # The session still works: nothing in the run logged it out.
    assert session.get(f"{base}/api/v1/me", timeout=TIMEOUT).status_code == 200

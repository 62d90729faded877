"""The runs API and bulk experiment actions with the stock determined==0.38.1 client, on a cluster
of one agent and one slot, on both databases: trial code's run metadata (core.train.set_metadata),
SearchRuns with Determined's filter (on general, metric, hyperparameter and tag columns) and sort
(by metric and hyperparameter, missing values last), run pause/resume/archive/move/delete and the
experiment actions by project (ids and filters), each answered one result per id,
experiments-search with each experiment's best trial, and the project's columns.
Every check reads the end state back (experiments really paused, killed, archived, moved, deleted)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from cairn.api.v1 import experiment_pb2
from tests.e2e.determined_client import det_runner, determined_env, sdk_runner
from tests.e2e.helpers import experiment, state, trials, wait_active, wait_state
from tests.support.cluster import TestCluster, running_cluster
from tests.support.polling import wait_for

RUNS_TRIAL_DIR = Path(__file__).parent / "fixtures" / "runs_trial"
SESSION = "client._determined._session"


@pytest.fixture
def one_slot(db_url: str | None, tmp_path: Path) -> Iterator[TestCluster]:
    with running_cluster(tmp_path / "cluster", db_url, agents=1, slots=1) as c:
        yield c


def _config(tmp_path: Path, name: str, steps: int, lr: float, labels: tuple[str, ...]) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"name: {name}\n"
        "entrypoint: python3 runs_trial.py\n"
        f"hyperparameters: {{steps: {steps}, lr: {lr}}}\n"
        "searcher: {name: single, metric: validation_loss, max_length: {batches: 10}}\n"
        f"labels: {json.dumps(list(labels))}\n"
        "max_restarts: 0\n"
    )
    return str(path)


def _create(
    det: Any, tmp_path: Path, name: str, steps: int, lr: float = 0.25, labels: tuple[str, ...] = ()
) -> int:
    out = det("experiment", "create", _config(tmp_path, name, steps, lr, labels), str(RUNS_TRIAL_DIR))
    found = re.search(r"Created experiment (\d+)", out)
    assert found, out
    return int(found.group(1))


def _run_filter(column: str, value: int, *, show_archived: bool = False) -> str:
    leaf = {
        "kind": "field",
        "columnName": column,
        "location": "LOCATION_TYPE_RUN",
        "operator": "=",
        "type": "COLUMN_TYPE_NUMBER",
        "value": value,
    }
    group = {"kind": "group", "conjunction": "and", "children": [leaf]}
    return json.dumps({"filterGroup": group, "showArchived": show_archived})


def _leaf_filter(column: str, operator: str, value: Any, location: str, kind: str) -> str:
    leaf = {
        "kind": "field",
        "columnName": column,
        "location": f"LOCATION_TYPE_{location}",
        "operator": operator,
        "type": f"COLUMN_TYPE_{kind}",
        "value": value,
    }
    return json.dumps({"filterGroup": {"kind": "group", "conjunction": "and", "children": [leaf]}})


def _results(response: dict[str, Any]) -> dict[int, str]:
    return {r["id"]: r["error"] for r in response["results"]}


def test_runs_and_bulk_experiment_actions(one_slot: TestCluster, tmp_path: Path) -> None:
    cluster = one_slot
    api = cluster.login()
    det = det_runner(determined_env(cluster, tmp_path / "home"))
    admin_det = det_runner(determined_env(cluster, tmp_path / "admin-home"), user="admin")
    sdk = sdk_runner(determined_env(cluster, tmp_path / "sdk-home"))

    short = _create(det, tmp_path, "short", steps=3, labels=("e2e-Tagged",))
    theirs = _create(admin_det, tmp_path, "admins", steps=3, lr=0.5)
    long = _create(det, tmp_path, "long", steps=3000)
    for experiment_id in (short, theirs):
        wait_state(api, experiment_id, "COMPLETED", timeout=300)
    (long_run,) = trials(api, long)
    (short_run,) = trials(api, short)

    # ---- trial code set its run's metadata; SearchRuns shows it, filtered as Determined filters ----
    def metadata() -> Any:
        return sdk(f"result = bindings.get_GetRunMetadata({SESSION}, runId={long_run.id}).metadata")

    wait_for(lambda: metadata() == {"phase": "training", "trial": long_run.id}, timeout=180, what="metadata")
    found = sdk(
        f"""
body = bindings.v1SearchRunsRequest(projectId=1, filter={_run_filter("experimentId", long)!r}, sort="id=desc")
response = bindings.post_SearchRuns({SESSION}, body=body)
result = [(r.id, r.experiment.id, r.experiment.name, r.metadata, r.hyperparameters, r.projectId)
          for r in response.runs] + [response.pagination.total]
"""
    )
    assert found == [[long_run.id, long, "long", {"phase": "training", "trial": long_run.id},
                      {"steps": 3000, "lr": 0.25}, 1], 1]  # fmt: skip
    everything = sdk(
        f"result = [r.id for r in bindings.post_SearchRuns({SESSION}, "
        "body=bindings.v1SearchRunsRequest()).runs]"
    )
    (their_run,) = trials(api, theirs)
    assert everything == sorted([short_run.id, long_run.id, their_run.id])

    # ---- filter and sort by metric, hyperparameter and tag columns (each validation_loss is 2*lr:
    # short's 0.5, theirs 1.0; the long run has none yet) ----
    def search(filter_text: str | None = None, sort: str | None = None) -> Any:
        return sdk(
            f"""
body = bindings.v1SearchRunsRequest(projectId=1, filter={filter_text!r}, sort={sort!r})
result = [r.id for r in bindings.post_SearchRuns({SESSION}, body=body).runs]
"""
        )

    low = _leaf_filter("validation.validation_loss.last", "<", 0.75, "VALIDATIONS", "NUMBER")
    assert search(low) == [short_run.id]
    assert search(_leaf_filter("hp.lr", "=", 0.5, "RUN_HYPERPARAMETERS", "NUMBER")) == [their_run.id]
    assert search(_leaf_filter("tags", "contains", "tagged", "EXPERIMENT", "TEXT")) == [short_run.id]
    # Missing values last, whichever the direction; then id ascending.
    assert search(sort="validation.validation_loss.last=desc") == [their_run.id, short_run.id, long_run.id]
    assert search(sort="validation.validation_loss.last=asc") == [short_run.id, their_run.id, long_run.id]
    assert search(sort="hp.lr=desc") == [their_run.id, short_run.id, long_run.id]
    unknown = sdk(
        f"""
try:
    bindings.post_SearchRuns({SESSION}, body=bindings.v1SearchRunsRequest(
        filter={_leaf_filter("nope", "=", 1, "RUN", "NUMBER")!r}))
except Exception as exc:
    result = str(exc)
"""
    )
    assert "does not filter runs on column 'nope'" in unknown
    # experiments-search: each experiment's best trial, chosen by its searcher metric; the long
    # one has none yet. Its metric columns are its best trial's.
    best = sdk(
        f"""
body = bindings.v1SearchExperimentsRequest(projectId=1, sort="searcherMetricsVal=asc")
result = [(e.experiment.id, e.bestTrial and (e.bestTrial.id, e.bestTrial.searcherMetricValue))
          for e in bindings.post_SearchExperiments({SESSION}, body=body).experiments]
"""
    )
    assert best == [[short, [short_run.id, 0.5]], [theirs, [their_run.id, 1.0]], [long, None]]
    by_metric = sdk(
        f"""
body = bindings.v1SearchExperimentsRequest(projectId=1, filter={low!r})
result = [e.experiment.id for e in bindings.post_SearchExperiments({SESSION}, body=body).experiments]
"""
    )
    assert by_metric == [short]

    # ---- pause and resume a run: its (single-trial) experiment pauses and resumes ----
    paused = sdk(
        f"""
body = bindings.v1PauseRunsRequest(projectId=1, runIds=[{long_run.id}, 98765])
result = bindings.post_PauseRuns({SESSION}, body=body).to_json()
"""
    )
    errors = _results(paused)
    assert errors[long_run.id] == "" and "not found" in errors[98765]
    wait_state(api, long, "PAUSED")
    sdk(
        f"bindings.post_ResumeRuns({SESSION}, "
        f"body=bindings.v1ResumeRunsRequest(projectId=1, runIds=[{long_run.id}]))"
    )
    wait_active(api, long)

    # ---- kill by experiment ids: one result per id, the missing one reported ----
    killed = sdk(
        f"""
body = bindings.v1KillExperimentsRequest(projectId=1, experimentIds=[{long}, 424242])
result = bindings.post_KillExperiments({SESSION}, body=body, projectId=1).to_json()
"""
    )
    errors = _results(killed)
    assert errors[long] == "" and "not found" in errors[424242]
    wait_state(api, long, "CANCELED", timeout=180)

    # ---- archive runs and experiments; another user's experiment is refused, and unchanged ----
    archived = sdk(
        f"""
body = bindings.v1ArchiveRunsRequest(projectId=1, runIds=[{short_run.id}])
result = bindings.post_ArchiveRuns({SESSION}, body=body).to_json()
"""
    )
    assert _results(archived) == {short_run.id: ""}
    hidden = sdk(
        f"result = [r.id for r in bindings.post_SearchRuns({SESSION}, "
        f"body=bindings.v1SearchRunsRequest(projectId=1, filter={_run_filter('id', short_run.id)!r})).runs]"
    )
    assert hidden == []
    sdk(
        f"bindings.post_UnarchiveRuns({SESSION}, "
        f"body=bindings.v1UnarchiveRunsRequest(projectId=1, runIds=[{short_run.id}]))"
    )
    by_filter = sdk(
        f"""
everything = bindings.v1BulkExperimentFilters()
body = bindings.v1ArchiveExperimentsRequest(projectId=1, experimentIds=[], filters=everything)
result = bindings.post_ArchiveExperiments({SESSION}, body=body, projectId=1).to_json()
"""
    )
    errors = _results(by_filter)
    assert errors[short] == errors[long] == "" and "belongs to another user" in errors[theirs]
    assert experiment(api, short).archived and experiment(api, long).archived
    assert not experiment(api, theirs).archived
    sdk(
        f"""
body = bindings.v1UnarchiveExperimentsRequest(projectId=1, experimentIds=[{short}, {long}])
bindings.post_UnarchiveExperiments({SESSION}, body=body, projectId=1)
"""
    )
    assert not experiment(api, short).archived and not experiment(api, long).archived

    # ---- move to another project, read its columns, then delete a run and an experiment ----
    det("workspace", "create", "Runs")
    det("project", "create", "Runs", "Moved")
    moved_to = json.loads(det("project", "describe", "Runs", "Moved", "--json"))["id"]
    moved = sdk(
        f"""
body = bindings.v1MoveExperimentsRequest(projectId=1, destinationProjectId={moved_to},
                                          experimentIds=[{short}, {long}])
result = bindings.post_MoveExperiments({SESSION}, body=body, projectId=1).to_json()
"""
    )
    assert _results(moved) == {short: "", long: ""}
    assert experiment(api, short).project_id == moved_to == experiment(api, long).project_id
    searched = sdk(
        f"""
body = bindings.v1SearchExperimentsRequest(projectId={moved_to}, sort="id=desc")
result = [e.experiment.id for e in bindings.post_SearchExperiments({SESSION}, body=body).experiments]
"""
    )
    assert searched == [long, short]
    columns = sdk(
        f"result = [(c.column, c.location.value, c.type.value) for c in "
        f"bindings.get_GetProjectColumns({SESSION}, id={moved_to}).columns]"
    )
    assert ["hp.lr", "LOCATION_TYPE_HYPERPARAMETERS", "COLUMN_TYPE_NUMBER"] in columns
    assert ["training.loss.min", "LOCATION_TYPE_TRAINING", "COLUMN_TYPE_NUMBER"] in columns
    assert ["validation.validation_loss.last", "LOCATION_TYPE_VALIDATIONS", "COLUMN_TYPE_NUMBER"] in columns
    deleted_run = sdk(
        f"""
body = bindings.v1DeleteRunsRequest(projectId={moved_to}, runIds=[{long_run.id}])
result = bindings.post_DeleteRuns({SESSION}, body=body).to_json()
"""
    )
    assert _results(deleted_run) == {long_run.id: ""}
    deleted = sdk(
        f"""
body = bindings.v1DeleteExperimentsRequest(projectId={moved_to}, experimentIds=[{short}])
result = bindings.delete_DeleteExperiments({SESSION}, body=body, projectId={moved_to}).to_json()
"""
    )
    assert _results(deleted) == {short: ""}
    for experiment_id in (short, long):

        def gone(experiment_id: int = experiment_id) -> bool:
            try:
                state(api, experiment_id)
            except grpc.RpcError as exc:
                return exc.code() == grpc.StatusCode.NOT_FOUND
            return False

        wait_for(gone, timeout=120, what=f"experiment {experiment_id} to be deleted")
    assert state(api, theirs) == "COMPLETED"

    # ---- bad input is refused naming the field, and changes nothing ----
    refused = sdk(
        f"""
try:
    bindings.post_KillRuns({SESSION}, body=bindings.v1KillRunsRequest(runIds=[], filter='{{"filterGroup": 7'))
except Exception as exc:
    result = str(exc)
"""
    )
    assert "filter" in refused and "not JSON" in refused
    assert (
        api.GetExperiment(experiment_pb2.GetExperimentRequest(experiment_id=theirs)).experiment.id == theirs
    )

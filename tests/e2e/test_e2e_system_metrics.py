"""System metrics for every task (issue 46), on a real cluster of one agent and one slot whose agent
samples every second: a trial's through Determined's profiler API with the stock SDK (the agent's
samples beside those its code reported with core.profiler.on()), a command's through Cairn's task
series; both stop when their task ends. Under the Docker runtime a command's container is found by
its PID namespace and sampled the same way."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import requests

from cairn.api.v1 import task_pb2
from tests.e2e.determined_client import det_runner, determined_env, sdk_runner
from tests.support.busy_code import busy_code, busy_experiment
from tests.support.cluster import TestCluster, running_cluster

SESSION = "client._determined._session"
# Busy for about 6 s with 128 MiB resident, Determined's profiler on for the whole of it.
TRIAL = busy_code(6, 128, trial=True, profiler=True)
SPIN = "python3 -c 'import time\nend = time.time() + 4\nwhile time.time() < end: pass'"


@pytest.fixture
def cluster(db_url: str | None, tmp_path: Path) -> Iterator[TestCluster]:
    """One agent with one slot, as Determined's own suite runs, sampling every second."""
    with running_cluster(
        tmp_path / "cluster",
        db_url,
        agents=1,
        slots=1,
        extra_env={"CAIRN_AGENT_SYSTEM_METRICS_INTERVAL": "1"},
    ) as c:
        yield c


def test_a_trials_system_metrics_through_the_stock_profiler_api(cluster: TestCluster, tmp_path: Path) -> None:
    env = determined_env(cluster, tmp_path / "home")
    det, sdk = det_runner(env), sdk_runner(env)
    config, context = busy_experiment(tmp_path, TRIAL)
    experiment_id = int(det("experiment", "create", str(config), str(context)).split()[-1])
    ended = sdk(
        f"exp = client.get_experiment({experiment_id})\n"
        "state = exp.wait(interval=1)\n"
        "result = [state.value, exp.list_trials()[0].id]"
    )
    assert ended[0] == "STATE_COMPLETED", ended
    trial_id = ended[1]

    series = sdk(
        f"result = [[l.name, l.agentId, l.gpuUuid, l.metricType.value] for r in "
        f"bindings.get_GetTrialProfilerAvailableSeries({SESSION}, trialId={trial_id}) for l in r.labels]"
    )
    names = {name for name, _, _, _ in series}
    # The agent's own samples of the trial's container...
    assert {"container_cpu_util", "container_memory_used", "container_processes"} <= names, series
    # ...and what core.profiler.on() reported from inside it, as Determined names them.
    assert {"cpu_util_simple", "memory_free"} <= names, series
    assert {agent for _, agent, _, _ in series} == {"agent-1"}
    assert {kind for _, _, _, kind in series} == {"PROFILER_METRIC_TYPE_SYSTEM"}
    assert not any("gpu" in name for name in names)  # CPU slots, no NVML in the trial: no GPU series

    batches = sdk(
        f"result = [[b.batch.labels.name, list(b.batch.values), list(b.batch.timestamps)] for b in "
        f"bindings.get_GetTrialProfilerMetrics({SESSION}, labels_trialId={trial_id}, "
        "labels_name='container_cpu_util')]"
    )
    assert batches and {name for name, _, _ in batches} == {"container_cpu_util"}
    values = [v for _, vs, _ in batches for v in vs]
    assert len(values) >= 3, values
    assert max(values) > 40.0, values  # one busy core, on a machine two share
    memory = sdk(
        f"result = [v for b in bindings.get_GetTrialProfilerMetrics({SESSION}, labels_trialId={trial_id}, "
        "labels_name='container_memory_used') for v in b.batch.values]"
    )
    assert max(memory) > 128 * 1024 * 1024, memory
    # Each report of Determined's profiler is a reading of its own (they carry no step to merge on).
    simple = sdk(
        f"result = [v for b in bindings.get_GetTrialProfilerMetrics({SESSION}, labels_trialId={trial_id}, "
        "labels_name='cpu_util_simple') for v in b.batch.values]"
    )
    assert len(simple) >= 2, simple
    # A filter on a series the trial does not have finds nothing; a timing series is not kept.
    assert (
        sdk(
            f"result = list(bindings.get_GetTrialProfilerMetrics({SESSION}, labels_trialId={trial_id}, "
            "labels_name='gpu_util'))"
        )
        == []
    )


def test_a_commands_series_stop_when_it_ends(cluster: TestCluster, tmp_path: Path) -> None:
    env = determined_env(cluster, tmp_path / "home")
    det = det_runner(env)
    det("cmd", "run", SPIN)
    (command,) = json.loads(det("cmd", "list", "--json"))
    api = cluster.login()
    reply = api.GetTaskSystemMetrics(task_pb2.GetTaskSystemMetricsRequest(task_id=command["id"]), timeout=30)
    by_name = {s.name: s for s in reply.series}
    assert {"container_cpu_util", "container_memory_used", "container_processes"} <= set(by_name)
    assert by_name["container_cpu_util"].unit == "percent"
    assert by_name["container_memory_used"].unit == "bytes"
    assert max(by_name["container_cpu_util"].values) > 40.0
    # The process runtime's containers share the agent's network namespace: the machine's traffic
    # is not reported as theirs.
    assert "container_net_throughput_recv" not in by_name
    assert "no GPU metrics: the task ran on CPU slots" in reply.notes
    # The command ended: a few intervals later, no reading has been added.
    last = max(t.ToDatetime(UTC) for t in by_name["container_cpu_util"].timestamps)
    assert last < datetime.now(UTC)
    time.sleep(3)
    again = api.GetTaskSystemMetrics(task_pb2.GetTaskSystemMetricsRequest(task_id=command["id"]), timeout=30)
    assert [len(s.values) for s in again.series] == [len(s.values) for s in reply.series]
    # Bad input names the field.
    with pytest.raises(Exception, match="limit"):
        api.GetTaskSystemMetrics(
            task_pb2.GetTaskSystemMetricsRequest(task_id=command["id"], limit=-1), timeout=30
        )
    # A live chart's next poll over REST (as the WebUI makes it): only what is new, and its place.
    assert cluster.record is not None and cluster.record.master_http_url
    base = cluster.record.master_http_url.rstrip("/")
    token = requests.post(
        f"{base}/api/v1/auth/login", json={"username": "determined", "password": ""}, timeout=30
    ).json()["token"]
    url = f"{base}/api/v1/tasks/{command['id']}/system-metrics"
    headers = {"Authorization": f"Bearer {token}"}
    page = requests.get(url, params={"afterId": str(reply.last_id)}, headers=headers, timeout=30)
    assert page.status_code == 200 and reply.last_id > 0
    assert (page.json()["series"], page.json()["lastId"]) == ([], str(reply.last_id))
    refused = requests.get(url, params={"afterId": "-1"}, headers=headers, timeout=30)
    assert refused.status_code == 400 and "after_id" in refused.text


@pytest.fixture
def docker_cluster(task_image: str, tmp_path: Path) -> Iterator[TestCluster]:
    with running_cluster(
        tmp_path / "cluster",
        None,
        runtime="docker",
        default_image=task_image,
        extra_env={"CAIRN_AGENT_SYSTEM_METRICS_INTERVAL": "1"},
    ) as c:
        yield c


@pytest.mark.timeout(600)
def test_a_docker_containers_processes_are_sampled(docker_cluster: TestCluster, tmp_path: Path) -> None:
    det = det_runner(determined_env(docker_cluster, tmp_path / "home"))
    det("cmd", "run", SPIN)
    (command,) = json.loads(det("cmd", "list", "--json"))
    reply = docker_cluster.login().GetTaskSystemMetrics(
        task_pb2.GetTaskSystemMetricsRequest(task_id=command["id"]), timeout=30
    )
    by_name = {s.name: s for s in reply.series}
    assert {"container_cpu_util", "container_memory_used", "container_processes"} <= set(by_name)
    assert max(by_name["container_cpu_util"].values) > 40.0
    assert min(by_name["container_processes"].values) >= 1

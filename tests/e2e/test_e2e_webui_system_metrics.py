"""System metrics in the WebUI, in Chromium (Playwright, as test_e2e_webui.py drives it), against a
real cluster whose agent samples every second (issue 46): a notebook's and a command's pages, and a
trial's Profiler tab, each draw their CPU and memory charts from what the agent measured of their
containers; the tasks page links to each task's page.

SQLite and the process runtime only: the browser side depends on neither.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn.api.v1 import task_pb2
from tests.e2e.determined_client import det_runner, determined_env, sdk_runner
from tests.e2e.test_e2e_webui import Browser, _expect_drawn, _log_in, browser_on, expect
from tests.support.busy_code import busy_code, busy_experiment
from tests.support.cluster import AuthedStub, TestCluster, running_cluster
from tests.support.polling import wait_for

# Busy about 8 s with 96 MiB resident: a trial's code and a command's.
BUSY = busy_code(8, 96)
TRIAL = busy_code(8, 96, trial=True)


@pytest.fixture
def sampled_cluster(tmp_path: Path) -> Iterator[TestCluster]:
    """One agent with two slots, process runtime, SQLite, sampling every second."""
    with running_cluster(
        tmp_path / "cluster", None, agents=1, slots=2, extra_env={"CAIRN_AGENT_SYSTEM_METRICS_INTERVAL": "1"}
    ) as c:
        yield c


@pytest.fixture
def ui(sampled_cluster: TestCluster, tmp_path: Path) -> Iterator[Browser]:
    yield from browser_on(sampled_cluster, tmp_path)


def _sampled(api: AuthedStub, task_id: str) -> set[str]:
    reply = api.GetTaskSystemMetrics(task_pb2.GetTaskSystemMetricsRequest(task_id=task_id), timeout=30)
    names = {s.name for s in reply.series if s.values}
    return names if {"container_cpu_util", "container_memory_used"} <= names else set()


def _charts_drawn(ui: Browser) -> None:
    for metric in ("container_cpu_util", "container_memory_used"):
        figure = ui.page.locator(f"figure[data-system-metric='{metric}']")
        expect(figure).to_be_visible()
        _expect_drawn(figure.locator("canvas").first)


def test_tasks_and_trials_show_their_system_metrics(
    sampled_cluster: TestCluster, ui: Browser, tmp_path: Path
) -> None:
    env = determined_env(sampled_cluster, tmp_path / "home")
    det, sdk = det_runner(env), sdk_runner(env)
    api = sampled_cluster.login()
    (tmp_path / "busy.py").write_text(BUSY)
    det("notebook", "start", "--no-browser", "--config", "resources.slots=0")
    (notebook,) = json.loads(det("notebook", "list", "--json"))
    det("cmd", "run", "-d", "--context", str(tmp_path), "python3 busy.py")
    (command,) = json.loads(det("cmd", "list", "--json"))
    config, context = busy_experiment(tmp_path, TRIAL)
    experiment_id = int(det("experiment", "create", str(config), str(context)).split()[-1])
    trial_id, trial_task = sdk(
        f"t = client.get_experiment({experiment_id}).list_trials()[0]\n"
        f"result = [t.id, bindings.get_GetTrial(client._determined._session, trialId=t.id).trial.taskId]"
    )
    for task_id in (notebook["id"], command["id"], trial_task):
        wait_for(lambda t=task_id: _sampled(api, t), timeout=180, what=f"task {task_id}'s samples")

    page = ui.page
    page.goto(f"{ui.base_url}/tasks")
    _log_in(ui)
    # The tasks page links each task to its own page.
    link = page.locator(f"tr[data-task-id='{notebook['id']}'] a[href='/tasks/{notebook['id']}']")
    expect(link).to_be_visible()
    link.click()
    page.wait_for_url(f"**/tasks/{notebook['id']}")
    _charts_drawn(ui)
    ui.shot("system-metrics-notebook")

    page.goto(f"{ui.base_url}/tasks/{command['id']}")
    _charts_drawn(ui)
    expect(page.locator(".system-metrics-note")).to_contain_text("no GPU metrics")

    page.goto(f"{ui.base_url}/trials/{trial_id}?tab=profiler")
    _charts_drawn(ui)
    ui.shot("system-metrics-trial")
    assert not ui.page_errors, ui.page_errors
    det("notebook", "kill", notebook["id"])

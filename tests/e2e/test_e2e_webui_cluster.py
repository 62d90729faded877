"""The cluster page's dynamic agents in Chromium (Playwright, as test_e2e_webui.py drives it): a
pool whose agents the master provisions with the local provider and no agent at the start. The
page shows the pool's provider and limits; an experiment of two one-slot trials makes instances
appear there RUNNING, with "launch" decisions whose reason names the pending requests; once the
experiment completes the instances show idle, and after the idle period they are gone from the
page, which then lists the "draining" and "terminating" decisions. The page's own polling brings
every change: it is never reloaded.

SQLite and the process runtime only: the browser side does not depend on either.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn.api.v1 import resourcepool_pb2
from cairn.localcluster.plan import Provisioning
from tests.e2e.helpers import config, create, wait_state

# The browser helpers of the WebUI's own e2e tests: one way to start Chromium.
from tests.e2e.test_e2e_webui import SCREENSHOTS, Browser, _log_in, browser_on, expect
from tests.support.cluster import AuthedStub, TestCluster, running_cluster
from tests.support.polling import wait_for

pytestmark = pytest.mark.timeout(420)
# Long enough for the page (polling every 3 s once a pool is provisioned) to show the idle agents.
IDLE_PERIOD_S = 12
# Agents started as processes on a loaded two-core machine: generous, but bounded.
AGENT_START_MS = 120_000


@pytest.fixture
def provisioned_cluster(tmp_path: Path) -> Iterator[TestCluster]:
    provision = Provisioning(min_agents=0, max_agents=2, max_idle_agent_period=f"{IDLE_PERIOD_S}s")
    with running_cluster(
        tmp_path / "cluster",
        None,
        agents=0,
        slots=1,
        provision=provision,
        extra_env={"CAIRN_PROVISIONER_PERIOD": "1"},
    ) as cluster:
        yield cluster


@pytest.fixture
def ui(provisioned_cluster: TestCluster, tmp_path: Path) -> Iterator[Browser]:
    yield from browser_on(provisioned_cluster, tmp_path)


def pool_instances(api: AuthedStub) -> list[resourcepool_pb2.ProvisionedInstance]:
    pools = api.GetResourcePools(resourcepool_pb2.GetResourcePoolsRequest()).resource_pools
    (pool,) = [p for p in pools if p.name == "default"]
    return list(pool.provisioner.instances)


def test_cluster_page_shows_provisioned_agents_and_decisions(
    provisioned_cluster: TestCluster, ui: Browser
) -> None:
    api = provisioned_cluster.login()
    b, page = ui, ui.page
    b.goto("/cluster")
    _log_in(b)
    page.wait_for_url(re.compile(r"/cluster"))

    panel = page.locator("section[data-provisioned-pool='default']")
    expect(panel.locator("[data-field='provider']")).to_have_text("local")
    expect(panel.locator("[data-field='limits']")).to_contain_text(
        re.compile(rf"0–2 instances of 1 slot each · retired after {IDLE_PERIOD_S}s idle")
    )
    expect(panel.locator("[data-field='provider-error']")).to_have_count(0)
    instances = panel.locator("table[data-table='instances'] tbody tr")
    decisions = panel.locator("table[data-table='decisions'] tbody tr")
    expect(instances).to_have_count(0)
    expect(panel).to_contain_text("No instance at the moment")
    expect(page.locator("tr[data-pool='default']")).to_contain_text("static · provider local")

    seeds = {"type": "categorical", "vals": [1, 2]}  # two one-slot trials
    text = config(
        name="webui-provisioned",
        hyperparameters={"steps": 24, "step_s": 0.25, "seed": seeds},
        searcher={"name": "grid", "metric": "validation_loss", "max_length": {"batches": 24}},
    )
    experiment_id = create(api, text)

    # Two instances appear and connect: both RUNNING on the page, each launched for pending work.
    expect(instances).to_have_count(2, timeout=AGENT_START_MS)
    expect(panel.locator("[data-phase='RUNNING']")).to_have_count(2, timeout=AGENT_START_MS)
    launches = decisions.filter(has=page.locator("td", has_text=re.compile(r"^launch$")))
    expect(launches).to_have_count(2)
    expect(launches.first).to_contain_text("pending request(s)")
    ids = {i.id for i in pool_instances(api)}
    assert len(ids) == 2
    for instance_id in ids:
        row = instances.filter(has=page.locator("td", has_text=re.compile(rf"^{re.escape(instance_id)}$")))
        expect(row).to_contain_text("pending request(s)")  # why it was launched
        expect(row.locator("td").nth(3)).not_to_have_text("–")  # connected at
    b.shot("50-cluster-provisioned-running")

    # The work done, the instances run nothing: shown idle, then drained, terminated and gone.
    wait_state(api, experiment_id, "COMPLETED", timeout=240)
    # (At least the last to finish: the first may already be retired if their trials ended apart.)
    expect(panel.locator("[data-phase='RUNNING']", has_text="Idle").first).to_be_visible(timeout=30_000)
    b.shot("51-cluster-provisioned-idle")
    expect(instances).to_have_count(0, timeout=(IDLE_PERIOD_S + 90) * 1000)
    wait_for(lambda: pool_instances(api) == [], timeout=10, what="no instance on the master either")
    for action in ("draining", "terminating"):
        done = decisions.filter(has=page.locator("td", has_text=re.compile(rf"^{action}$")))
        for instance_id in ids:
            expect(done.filter(has_text=instance_id).first).to_be_visible()
    expect(decisions.first.locator("td").nth(1)).not_to_have_text("launch")  # newest first
    b.shot("52-cluster-provisioned-retired")
    assert (SCREENSHOTS / "52-cluster-provisioned-retired.png").is_file()
    b.check_clean()

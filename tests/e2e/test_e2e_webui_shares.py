"""How teams share the cluster, in the WebUI (Chromium, driven by Playwright as test_e2e_webui.py
does), against a real cluster of one agent and one slot whose `default` pool schedules by fair
share, with a second pool `reserved` of no agents that an admin may bind.

Two workspaces' experiments want the one slot: the cluster page's card of `default` says "fair
share" and shows both workspaces in its shares table (and a workspace's users when expanded); the
queue page lists the job that waits with the reason the master gives; an admin binds `reserved`
to one workspace from its card (a lock with the count, and the master lists the binding); on a
workspace's page the admin sets its weight and quota (the master then answers them; in the
priority pool `reserved`, a quota with no weight), a refused
value shows the master's words and changes nothing, and a non-admin's attempt shows the refusal.
On both databases, as the WebUI's own tests run.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cairn.api.v1 import experiment_pb2, job_pb2, workspace_pb2
from cairn.api.v1 import resourcepool_pb2 as rpb
from tests.e2e.helpers import config, create, wait_state

# The browser helpers of the WebUI's own e2e tests: one way to start Chromium.
from tests.e2e.test_e2e_webui import Browser, _log_in, browser_on, expect
from tests.support.cluster import AuthedStub, TestCluster, running_cluster
from tests.support.polling import wait_for

pytestmark = pytest.mark.timeout(420)

# Long enough to still want the slot when the test ends (it kills both experiments).
STEPS = 4000


@pytest.fixture
def fair_cluster(db_url: str | None, tmp_path: Path) -> Iterator[TestCluster]:
    master_config = tmp_path / "master.yaml"
    master_config.write_text(
        "resource_pools:\n"
        "  - pool_name: default\n"
        "    scheduler: {type: fair_share, fair_share: {usage_half_life: 10m}}\n"
        "  - pool_name: reserved\n"
        "    description: for one team\n"
    )
    with running_cluster(
        tmp_path / "cluster",
        db_url,
        agents=1,
        slots=1,
        extra_env={"CAIRN_MASTER_CONFIG": str(master_config)},
    ) as cluster:
        yield cluster


@pytest.fixture
def ui(fair_cluster: TestCluster, tmp_path: Path) -> Iterator[Browser]:
    yield from browser_on(fair_cluster, tmp_path)


def _workspace(api: AuthedStub, name: str) -> int:
    workspace_id = int(api.PostWorkspace(workspace_pb2.PostWorkspaceRequest(name=name)).workspace.id)
    api.PostProject(workspace_pb2.PostProjectRequest(name="p", workspace_id=workspace_id))
    return workspace_id


def _long_experiment(api: AuthedStub, workspace: str) -> int:
    text = config(
        name=f"{workspace.lower()}-long",
        workspace=workspace,
        project="p",
        hyperparameters={"steps": STEPS, "step_s": 0.1},
        searcher={"max_length": {"batches": STEPS}},
    )
    return create(api, text)


def _waiting_job(api: AuthedStub) -> job_pb2.Job | None:
    jobs = api.GetJobsV2(job_pb2.GetJobsV2Request(resource_pool="default", limit=-1)).jobs
    waiting = [j.full for j in jobs if j.full.allocated_slots == 0 and j.full.waiting_reason]
    return waiting[0] if waiting else None


def _share(api: AuthedStub, workspace_id: int) -> workspace_pb2.PoolShare:
    shares = api.GetWorkspacePoolShares(
        workspace_pb2.GetWorkspacePoolSharesRequest(workspace_id=workspace_id)
    ).shares
    (share,) = [s for s in shares if s.resource_pool == "default" and s.user_id == 0]
    return share


def _edit_quota(page: Any, weight: str, guaranteed: str, maximum: str) -> Any:
    """Opens the form of the workspace's own row in `default`, fills it and saves; the form."""
    row = page.locator("tr[data-share-pool='default'][data-share-who='workspace']")
    row.get_by_role("button", name="Edit Workspace in default").click()
    form = page.locator("form.share-form")
    form.get_by_label("Weight").fill(weight)
    form.get_by_label("Guaranteed slots").fill(guaranteed)
    form.get_by_label("Max slots").fill(maximum)
    form.get_by_role("button", name="Save").click()
    return form


def test_shares_queue_bindings_and_quotas_in_the_webui(fair_cluster: TestCluster, ui: Browser) -> None:
    admin = fair_cluster.login("admin")
    vision = _workspace(admin, "Vision")
    speech = _workspace(admin, "Speech")
    experiments = [_long_experiment(admin, "Vision"), _long_experiment(admin, "Speech")]
    b, page = ui, ui.page

    # The cluster page: the pool's scheduler, and its division between the two workspaces.
    b.goto("/cluster")
    _log_in(b, "admin")
    page.wait_for_url(re.compile(r"/cluster"))
    card = page.locator("section[data-pool-card='default']")
    expect(card.locator("[data-field='scheduler']")).to_have_text("fair share")
    reserved = page.locator("section[data-pool-card='reserved']")
    expect(reserved.locator("[data-field='scheduler']")).to_have_text("priority")
    rows = card.locator("table[data-table='shares'] tbody tr")
    for name in ("Vision", "Speech"):
        row = rows.filter(has=page.locator("th", has_text=f"workspace '{name}'"))
        expect(row.locator("[data-field='wanted']")).to_have_text("1", timeout=60_000)
    held = [int(t) for t in card.locator("[data-field='held']").all_inner_texts()]
    assert sum(held) <= 1  # one slot in the pool
    card.get_by_role("button", name="Show the users of workspace 'Vision'").click()
    expect(card.locator("tr.share-user", has_text="user 'admin'")).to_have_count(1)
    b.shot("60-cluster-fair-shares")

    # An admin binds `reserved` to Speech from its card: a lock with the count, and the master agrees.
    expect(card.get_by_role("button", name="Manage bindings")).to_have_count(0)  # a default pool
    expect(reserved.locator("[data-field='bound-count']")).to_have_count(0)
    reserved.get_by_role("button", name="Manage bindings").click()
    reserved.locator(".bindings-editor select").select_option(label="Speech")
    reserved.get_by_role("button", name="Add").click()
    reserved.get_by_role("button", name="Apply").click()
    lock = reserved.locator("[data-field='bound-count']")
    expect(lock).to_have_text("1", timeout=15_000)
    expect(lock).to_have_attribute("aria-label", "Bound to 1 workspace")
    expect(lock.locator("svg.lock-icon")).to_have_count(1)
    expect(reserved.locator("[data-field='bound-workspaces']")).to_contain_text("Bound to Speech")
    bound = admin.ListWorkspacesBoundToRP(rpb.ListWorkspacesBoundToRPRequest(resource_pool_name="reserved"))
    assert list(bound.workspace_ids) == [speech]
    b.shot("61-cluster-pool-bound")

    # The queue page: the job that waits, with the master's reason.
    waiting = wait_for(lambda: _waiting_job(admin), timeout=60, what="a job waiting with a reason")
    page.get_by_role("link", name="Queue").click()
    queue_row = page.locator(f"table[data-queue-pool='default'] tr[data-job-id='{waiting.job_id}']")
    reason_cell = queue_row.locator("[data-field='waiting-reason']")
    expect(reason_cell).not_to_have_text("–")

    def shown_as_the_master_says() -> bool:
        # The reason is read again each time: it may change between the scheduler's passes.
        now = _waiting_job(admin)
        if now is None or now.job_id != waiting.job_id:
            return False
        return bool(reason_cell.inner_text() == now.waiting_reason)

    wait_for(shown_as_the_master_says, timeout=30, what="the page to show the master's waiting reason")
    # A forecast, where the master gives one: relative, the time on hover, and what it waits for.
    forecast = _waiting_job(admin)
    if forecast is not None and forecast.HasField("predicted_start"):
        start = queue_row.locator("time[data-field='predicted-start']")
        expect(start).to_have_text(re.compile(r"^(in ~\d+ (s|min|h|d)|any moment now)$"))
        expect(start).to_have_attribute("title", re.compile(r"\d"))
    if forecast is not None and forecast.predicted_after:
        expect(queue_row.locator("[data-field='predicted-after']")).not_to_have_text("–")
    expect(page.locator("table[data-queue-pool='default'] tbody tr")).to_have_count(2)
    b.shot("62-queue")

    # An admin sets Vision's weight and quota from its page (reached from an experiment of it); the
    # master answers them.
    b.goto(f"/experiments/{experiments[0]}")
    page.get_by_role("link", name="Vision", exact=True).click()
    page.wait_for_url(re.compile(rf"/workspaces/{vision}$"))
    expect(page.locator("h1")).to_have_text("Vision")
    form = _edit_quota(page, "2", "1", "1")
    expect(form).to_have_count(0)
    max_cell = page.locator("tr[data-share-pool='default'][data-share-who='workspace'] [data-field='max']")
    expect(max_cell).to_have_text("1")
    share = _share(admin, vision)
    assert (share.weight, share.guaranteed_slots, share.max_slots) == (2.0, 1, 1)
    # A value the master refuses: its words, naming the field, and nothing changed.
    form = _edit_quota(page, "2", "3", "2")
    expect(form.get_by_role("alert")).to_have_text("guaranteedSlots: 3 is more than maxSlots 2")
    share = _share(admin, vision)
    assert (share.weight, share.guaranteed_slots, share.max_slots) == (2.0, 1, 1)
    # And one user's own quota within the workspace.
    page.get_by_role("button", name="Set a user's quota in default").click()
    form = page.locator("form.share-form")
    form.locator("select").select_option(label="admin")
    form.get_by_label("Max slots").fill("1")
    form.get_by_role("button", name="Save").click()
    user_row = page.locator("tr[data-share-pool='default'][data-share-who='admin']")
    expect(user_row.locator("[data-field='max']")).to_have_text("1")
    shares = admin.GetWorkspacePoolShares(workspace_pb2.GetWorkspacePoolSharesRequest(workspace_id=vision))
    assert [(s.username, s.max_slots) for s in shares.shares if s.user_id] == [("admin", 1)]
    # A priority pool keeps quotas too, with no weight to set.
    reserved_row = page.locator("tr[data-share-pool='reserved'][data-share-who='workspace']")
    expect(reserved_row.locator("[data-field='weight']")).to_have_text("–")
    reserved_row.get_by_role("button", name="Edit Workspace in reserved").click()
    form = page.locator("form.share-form")
    expect(form.get_by_label("Weight")).to_have_count(0)
    form.get_by_label("Max slots").fill("3")
    form.get_by_role("button", name="Save").click()
    expect(reserved_row.locator("[data-field='max']")).to_have_text("3")
    shares = admin.GetWorkspacePoolShares(workspace_pb2.GetWorkspacePoolSharesRequest(workspace_id=vision))
    reserved_shares = [(s.max_slots, s.fair_share) for s in shares.shares if s.resource_pool == "reserved"]
    assert reserved_shares == [(3, False)]
    b.shot("63-workspace-quota")

    # A non-admin's attempt: the refusal shown, nothing changed.
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url(re.compile(r"/login"))
    b.goto(f"/workspaces/{vision}")
    _log_in(b, "determined")
    expect(page.get_by_text("Only an admin can change them.")).to_be_visible()
    form = _edit_quota(page, "5", "0", "0")
    expect(form.get_by_role("alert")).to_contain_text("only an admin may set weights and quotas")
    share = _share(admin, vision)
    assert (share.weight, share.guaranteed_slots, share.max_slots) == (2.0, 1, 1)
    b.shot("64-workspace-quota-refused")

    for experiment_id in experiments:
        admin.KillExperiment(experiment_pb2.KillExperimentRequest(id=experiment_id))
    for experiment_id in experiments:
        wait_state(admin, experiment_id, "CANCELED", timeout=120)
    b.check_clean()

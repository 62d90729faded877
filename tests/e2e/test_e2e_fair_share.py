"""Fair share on a real cluster of two agents of one slot, its pool's config saying `scheduler:
{type: fair_share}` (Determined's name): one workspace's search borrows both idle slots; when a
second workspace's experiment comes, one borrowed slot is taken back by graceful preemption (the
trial checkpoints, and resumes from it later), and both experiments complete; an admin's quota
(`cairn workspace set-quota --max`) then holds a workspace to one slot while the other slot idles,
the job list naming the quota. Driven with the stock `det` and Cairn's CLI, judged by end state, on
both databases."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.determined_client import det_runner, determined_env
from tests.e2e.helpers import wait_state
from tests.e2e.teams import make_teams, pool_cluster, pool_types, preempted_runs, running_trials, submit
from tests.e2e.test_e2e_master_continue import cairn_runner
from tests.support.cluster import TestCluster
from tests.support.polling import wait_for


@pytest.fixture
def fair_cluster(db_url: str | None, tmp_path: Path) -> Iterator[TestCluster]:
    scheduler = (
        "      type: fair_share\n      fair_share: {usage_half_life: 10m, min_run_before_reclaim: 1s}\n"
    )
    with pool_cluster(tmp_path, db_url, scheduler) as cluster:
        yield cluster


def test_borrowed_slots_come_back_by_preemption_and_a_quota_caps_a_workspace(
    fair_cluster: TestCluster, tmp_path: Path
) -> None:
    env = determined_env(fair_cluster, tmp_path / "home")
    admin = det_runner(env, "admin")
    make_teams(admin, "Vision", "Speech")
    api = fair_cluster.login("admin")
    assert pool_types(env) == [["default", "SCHEDULER_TYPE_FAIR_SHARE"]]

    # Vision alone borrows both slots.
    vision = submit(admin, tmp_path, "Vision", "v", 2, 60)

    wait_for(lambda: running_trials(api, vision) == 2, timeout=90, what="both of Vision's trials to run")

    # Speech comes: one borrowed slot is taken back; its trial runs while Vision keeps one.
    speech = submit(admin, tmp_path, "Speech", "s", 1, 5)

    def divided() -> bool:
        shares = json.loads(cairn("resource-pool", "shares", "default", "--json").stdout)
        names = {g["name"]: g for g in shares.get("workspaces", [])}
        return "workspace 'Speech'" in names and names["workspace 'Vision'"]["nominalSlots"] == 1

    cairn = cairn_runner(fair_cluster, tmp_path / "cairn-home", "admin")
    wait_for(divided, timeout=60, what="the pool's division to name both workspaces")
    wait_state(api, speech, "COMPLETED", timeout=120)
    wait_state(api, vision, "COMPLETED", timeout=180)
    preempted = preempted_runs(api, vision)
    assert len(preempted) == 1  # exactly one borrowed slot came back
    assert any(line.startswith("DET-RESUMED") for line in preempted[0])  # and resumed from its checkpoint

    # A quota: Vision may hold one slot, even with the other idle; the job list names the quota.
    set_quota = cairn("workspace", "set-quota", "Vision", "--pool", "default", "--max", "1")
    assert set_quota.returncode == 0, set_quota.stderr
    capped = submit(admin, tmp_path, "Vision", "v2", 2, 40)

    def quota_named() -> bool:
        listed = json.loads(cairn("job", "list", "-p", "default", "--json").stdout)["jobs"]
        # The forecast names what the waiting trial waits for (its experiment's running trial).
        return any(
            job["allocatedSlots"] == 1
            and "of its maximum of 1 in pool 'default'" in job.get("waitingReason", "")
            and job.get("predictedAfter")
            for job in listed
        )

    wait_for(quota_named, timeout=60, what="the job list to name Vision's quota")
    shown = json.loads(cairn("workspace", "quota", "Vision", "--json").stdout)["shares"]
    assert shown[0]["maxSlots"] == 1 and shown[0]["slotsInUse"] == 1
    refused = cairn(
        "workspace", "set-quota", "Vision", "--pool", "default", "--guaranteed", "3", "--max", "2"
    )
    assert refused.returncode != 0 and "guaranteedSlots: 3 is more than maxSlots 2" in refused.stderr
    user = cairn_runner(fair_cluster, tmp_path / "user-home", "determined")  # not an admin
    denied = user("workspace", "set-quota", "Speech", "--pool", "default", "--max", "1")
    assert denied.returncode != 0 and "only an admin may set weights and quotas" in denied.stderr
    speech_shares = json.loads(cairn("workspace", "quota", "Speech", "--json").stdout)["shares"]
    assert speech_shares[0].get("maxSlots", 0) == 0
    admin("experiment", "kill", str(capped))
    wait_state(api, capped, "CANCELED", timeout=120)

"""Quotas in a priority pool on a real cluster of two agents of one slot, its pool's config saying
`scheduler: {type: priority}` (Determined's own scheduler): a workspace guaranteed one slot gets it
back from another workspace's more important search by graceful preemption (the trial checkpoints,
and resumes from it later), and both complete; a workspace's maximum then holds it to one slot
while the other slot idles, the job list naming the quota; refusals (a weight, guarantees the pool
cannot keep, a quota below zero, a missing pool, a non-admin) are clear 4xx errors that change
nothing. Driven with the stock `det`, Cairn's CLI and the REST API, judged by end state, on both
databases."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.e2e.determined_client import det_runner, determined_env
from tests.e2e.helpers import wait_state
from tests.e2e.teams import make_teams, pool_cluster, pool_types, preempted_runs, running_trials, submit
from tests.e2e.test_e2e_master_continue import cairn_runner
from tests.e2e.test_e2e_rest import TIMEOUT, base_url, rest_login
from tests.support.cluster import TestCluster
from tests.support.polling import wait_for


@pytest.fixture
def priority_cluster(db_url: str | None, tmp_path: Path) -> Iterator[TestCluster]:
    # The minimum run before a guarantee reclaims is the pool's `min_run_before_reclaim` (10 s
    # unless set), as in a fair-share pool.
    scheduler = "      type: priority\n      fair_share: {min_run_before_reclaim: 2s}\n"
    with pool_cluster(tmp_path, db_url, scheduler) as cluster:
        yield cluster


def test_a_guarantee_is_reclaimed_and_a_maximum_holds_in_a_priority_pool(
    priority_cluster: TestCluster, tmp_path: Path
) -> None:
    env = determined_env(priority_cluster, tmp_path / "home")
    admin = det_runner(env, "admin")
    make_teams(admin, "Vision", "Speech")
    api = priority_cluster.login("admin")
    cairn = cairn_runner(priority_cluster, tmp_path / "cairn-home", "admin")
    assert pool_types(env) == [["default", "SCHEDULER_TYPE_PRIORITY"]]

    # Speech is guaranteed one of the two slots (no FailedPrecondition in a priority pool now).
    guaranteed = cairn("workspace", "set-quota", "Speech", "--pool", "default", "--guaranteed", "1")
    assert guaranteed.returncode == 0, guaranteed.stderr

    # Vision's urgent search takes both idle slots.
    vision = submit(admin, tmp_path, "Vision", "v", 2, 150, priority=1)

    wait_for(lambda: running_trials(api, vision) == 2, timeout=90, what="both of Vision's trials to run")

    # Speech's least important experiment comes: its guaranteed slot is taken back from Vision.
    speech = submit(admin, tmp_path, "Speech", "s", 1, 5, priority=99)
    wait_state(api, speech, "COMPLETED", timeout=120)
    wait_state(api, vision, "COMPLETED", timeout=180)
    preempted = preempted_runs(api, vision)
    assert len(preempted) == 1  # exactly the guaranteed slot came back
    assert any(line.startswith("DET-RESUMED") for line in preempted[0])  # and resumed from its checkpoint

    # A maximum: Vision may hold one slot, even with the other idle; the job list names the quota.
    capped_quota = cairn("workspace", "set-quota", "Vision", "--pool", "default", "--max", "1")
    assert capped_quota.returncode == 0, capped_quota.stderr
    capped = submit(admin, tmp_path, "Vision", "v2", 2, 400, priority=1)

    def quota_named() -> bool:
        listed = json.loads(cairn("job", "list", "-p", "default", "--json").stdout)["jobs"]
        return any(
            job["allocatedSlots"] == 1
            and "workspace 'Vision' holds 1 slot of its maximum of 1 in pool 'default'"
            in job.get("waitingReason", "")
            for job in listed
        )

    wait_for(quota_named, timeout=60, what="the job list to name Vision's quota")
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:  # never more than the maximum, while a slot idles
        shown = json.loads(cairn("workspace", "quota", "Vision", "--json").stdout)["shares"]
        (own,) = [s for s in shown if not s.get("userId")]
        assert own["maxSlots"] == 1 and own["slotsInUse"] <= 1
        assert not own.get("fairShare")  # a priority pool: the quota alone, no weight

    # Refusals: each a clear 4xx naming the field, nothing changed.
    def refused(*args: str, says: str) -> None:
        result = cairn("workspace", "set-quota", *args)
        assert result.returncode != 0 and says in result.stderr, result.stderr

    refused(
        "Vision", "--pool", "default", "--guaranteed", "2", says="guaranteedSlots: the guarantees in pool"
    )
    refused(
        "Vision", "--pool", "default", "--weight", "2", says="weight: pool 'default' schedules by priority"
    )
    refused("Vision", "--pool", "default", "--max", "-1", says="maxSlots: 0 to 100000")
    refused("Vision", "--pool", "gpus", "--max", "1", says="resourcePool: no resource pool 'gpus'")
    user = cairn_runner(priority_cluster, tmp_path / "user-home", "determined")  # not an admin
    denied = user("workspace", "set-quota", "Speech", "--pool", "default", "--max", "1")
    assert denied.returncode != 0 and "only an admin may set weights and quotas" in denied.stderr
    # The REST API says the same with its status.
    base = base_url(priority_cluster)
    session = requests.Session()
    token = rest_login(base, session, "admin").json()["token"]
    vision_id = next(int(w["id"]) for w in _workspaces(base, session, token) if w["name"] == "Vision")
    answer = session.put(
        f"{base}/api/v1/workspaces/{vision_id}/pool-shares/default",
        json={"guaranteedSlots": -1},
        headers={"Authorization": f"Bearer {token}"},
        timeout=TIMEOUT,
    )
    assert answer.status_code == 400 and "guaranteedSlots: 0 to 100000" in answer.text
    vision_row = json.loads(cairn("workspace", "quota", "Vision", "--json").stdout)["shares"][0]
    speech_row = json.loads(cairn("workspace", "quota", "Speech", "--json").stdout)["shares"][0]
    assert (vision_row.get("guaranteedSlots", 0), vision_row["maxSlots"]) == (0, 1)
    assert (speech_row["guaranteedSlots"], speech_row.get("maxSlots", 0)) == (1, 0)

    admin("experiment", "kill", str(capped))
    wait_state(api, capped, "CANCELED", timeout=120)


def _workspaces(base: str, session: requests.Session, token: str) -> list[dict[str, object]]:
    listed = session.get(
        f"{base}/api/v1/workspaces", headers={"Authorization": f"Bearer {token}"}, timeout=TIMEOUT
    )
    assert listed.status_code == 200, listed.text
    return list(listed.json()["workspaces"])

"""Quotas in a priority pool, through the master (workspaces/pool_shares.py,
scheduling/fair_share_inputs.py, the scheduler's quota_pass.py): a workspace's maximum holds with
idle slots and the waiting reason names it; a workspace's guarantee is reclaimed by graceful
preemption from another workspace's more important work; weights, guarantees the pool cannot keep,
and everything refused for fair-share pools too, are refused naming the field and change nothing."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from services.master.configuration.pools import PoolSettings
from services.master.domain.kernel.errors import InvalidArgument, NotFound, PermissionDenied
from services.master.domain.scheduling.fair_share_inputs import share_groups
from services.master.domain.scheduling.scheduling_rows import pool_messages
from services.master.domain.workspaces import pool_shares
from services.master.gateway import prometheus
from services.master.store import models
from tests.unit.master.domain.harness import Master

pytestmark = pytest.mark.on_each_database

SEARCH = {
    "searcher": {
        "name": "random",
        "metric": "loss",
        "max_trials": 4,
        "max_concurrent_trials": 4,
        "max_length": {"batches": 10},
    },
    "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 1}},
}


@pytest.fixture
def cluster(master: Master) -> Iterator[Master]:
    """A master whose only pool schedules by priority (its minimum run before reclaim off), and
    one agent of 2 slots."""
    master.close()
    priority = master.restarted(pools=[PoolSettings("default", min_run_before_reclaim_s=0.0)])
    try:
        priority.add_agent("a1", slots=2)
        yield priority
    finally:
        priority.close()


def _settings(master: Master, workspace_id: int) -> list[tuple[str, int, float, int, int, int, bool]]:
    return [
        (s.pool, s.user_id, s.weight, s.guaranteed_slots, s.max_slots, s.slots_in_use, s.fair_share)
        for s in pool_shares.shares_of(master.ctx, workspace_id)
    ]


def test_a_maximum_caps_a_workspace_in_a_priority_pool_and_the_reason_names_it(cluster: Master) -> None:
    team, project = cluster.add_workspace("Capped")
    pool_shares.set_share(cluster.ctx, cluster.admin, team, "default", max_slots=1)
    searching = cluster.create(project_id=project, **SEARCH)
    assert len(cluster.placed(searching)) == 1  # one slot idles
    reasons = [why for why, _ in cluster.scheduling.waiting.reasons.values()]
    assert len(reasons) == 3
    assert all(
        why == "workspace 'Capped' holds 1 slot of its maximum of 1 in pool 'default'; starts when its own "
        "work ends"
        for why in reasons
    )
    # Its members see the usage against the quota; a priority pool has no weight to show.
    assert _settings(cluster, team) == [("default", 0, 1.0, 0, 1, 1, False)]
    # So does /metrics, for every kind of pool.
    labels = f'{{pool="default",user="",workspace="Capped",workspace_id="{team}"}}'
    scraped = prometheus.render(cluster.ctx).splitlines()
    assert f"cairn_quota_max_slots{labels} 1" in scraped
    assert f"cairn_quota_slots_in_use{labels} 1" in scraped
    assert f"cairn_quota_guaranteed_slots{labels} 0" in scraped
    # Cleared, the idle slot is taken at once, and the quota is gone from /metrics.
    pool_shares.clear_share(cluster.ctx, cluster.admin, team, "default")
    cluster.settle()
    assert len(cluster.placed(searching)) == 2
    assert "cairn_quota_max_slots{" not in prometheus.render(cluster.ctx)


def test_a_guarantee_is_reclaimed_from_another_workspace_whatever_the_priorities(cluster: Master) -> None:
    _, team_a = cluster.add_workspace("A")
    team_b, project_b = cluster.add_workspace("B")
    searching = cluster.create(project_id=team_a, **SEARCH, resources={"priority": 1})
    held = cluster.placed(searching)
    assert len(held) == 2  # A's urgent search fills the pool
    for alloc in held:
        cluster.run_containers(alloc.id)

    pool_shares.set_share(cluster.ctx, cluster.admin, team_b, "default", guaranteed_slots=1)
    unimportant = cluster.create(project_id=project_b, resources={"priority": 99})
    (b_trial,) = cluster.trials(unimportant)
    waiting = cluster.live(b_trial.id)
    assert waiting.state == "PENDING"
    why, _ = cluster.scheduling.waiting.reasons[waiting.id]
    assert why.startswith("reclaiming the slots guaranteed to workspace 'B' in pool 'default'")
    # One of A's trials is asked to stop gracefully (it checkpoints and resumes later).
    asked = [a for a in held if cluster.live(a.trial_id).preempt_requested]
    assert len(asked) == 1
    victim = cluster.live(asked[0].trial_id)
    with cluster.ctx.unit_of_work() as w:
        w.session.get_one(models.Allocation, victim.id).preempt_acked = True
    (container,) = cluster.containers(victim.id)
    cluster.exit(container.id, 0)
    cluster.settle()
    assert cluster.live(b_trial.id).state == "ASSIGNED"
    # A's preempted trial waits for a slot; B keeps its guaranteed one against A's priority.
    assert len(cluster.placed(searching)) == 1
    cluster.settle()
    assert cluster.live(b_trial.id).state == "ASSIGNED" and len(cluster.placed(searching)) == 1


def test_the_groups_sent_with_a_priority_pool_are_its_quotas(master: Master) -> None:
    team, _ = master.add_workspace("T")
    other, _ = master.add_workspace("O")
    user = master.add_user("alice")
    master.add_agent("a1", slots=2)

    def sent() -> tuple[list[tuple[str, str, int, int]], list[tuple[str, int]], bool]:
        with master.db.read() as s:
            groups = share_groups(s, master.ctx.settings.pools, datetime.now(UTC))
        (message,) = pool_messages(master.ctx, groups, datetime.now(UTC))
        return (
            [(g.key, g.name, g.guaranteed_slots, g.max_slots) for g in message.workspaces],
            [(g.name, g.max_slots) for g in message.users],
            message.HasField("protect_started_after"),
        )

    assert sent() == ([], [], False)
    pool_shares.set_share(master.ctx, master.admin, team, "default", max_slots=2)
    pool_shares.set_share(master.ctx, master.admin, team, "default", user_id=user.user_id or 0, max_slots=1)
    # Only groups with a quota; a maximum reclaims nothing, so no minimum run is sent.
    assert sent() == ([(str(team), "workspace 'T'", 0, 2)], [("user 'alice' in workspace 'T'", 1)], False)
    # A guarantee is reclaimed for: the pool's minimum run before reclaim (10 s by default) holds.
    pool_shares.set_share(master.ctx, master.admin, other, "default", guaranteed_slots=1)
    workspaces_, _, protected = sent()
    assert [g[0] for g in workspaces_] == sorted([str(team), str(other)]) and protected


def test_quotas_are_refused_naming_the_field_and_change_nothing(cluster: Master) -> None:
    team, _ = cluster.add_workspace("T")
    other, _ = cluster.add_workspace("O")
    user = cluster.add_user("alice")
    ctx, admin = cluster.ctx, cluster.admin
    with pytest.raises(PermissionDenied, match="only an admin"):
        pool_shares.set_share(ctx, user, team, "default", max_slots=1)
    with pytest.raises(InvalidArgument, match="maxSlots: 0 to 100000"):
        pool_shares.set_share(ctx, admin, team, "default", max_slots=-1)
    with pytest.raises(InvalidArgument, match="guaranteedSlots: 0 to 100000"):
        pool_shares.set_share(ctx, admin, team, "default", guaranteed_slots=-1)
    with pytest.raises(InvalidArgument, match="resourcePool: no resource pool 'gpus'"):
        pool_shares.set_share(ctx, admin, team, "gpus", max_slots=1)
    with pytest.raises(InvalidArgument, match="weight: pool 'default' schedules by priority"):
        pool_shares.set_share(ctx, admin, team, "default", weight=2.0, max_slots=1)
    assert _settings(cluster, team) == [("default", 0, 1.0, 0, 0, 0, False)]

    # The pool has 2 slots: guarantees may promise 2, not 3.
    pool_shares.set_share(ctx, admin, team, "default", guaranteed_slots=1)
    pool_shares.set_share(ctx, admin, other, "default", guaranteed_slots=1)
    with pytest.raises(
        InvalidArgument, match="guaranteedSlots: the guarantees in pool 'default' would add up to 3"
    ):
        pool_shares.set_share(ctx, admin, other, "default", guaranteed_slots=2)
    # A user's guarantee is part of its workspace's: within T's own it promises nothing more.
    pool_shares.set_share(ctx, admin, team, "default", user_id=user.user_id or 0, guaranteed_slots=1)
    with pytest.raises(InvalidArgument, match="would add up to 3 slots, more than the 2 it has"):
        pool_shares.set_share(ctx, admin, team, "default", user_id=user.user_id or 0, guaranteed_slots=2)
    assert [s.guaranteed_slots for s in pool_shares.shares_of(ctx, other)] == [1]
    assert [s.guaranteed_slots for s in pool_shares.shares_of(ctx, team)] == [1, 1]
    with pytest.raises(NotFound, match="workspace 999 not found"):
        pool_shares.set_share(ctx, admin, 999, "default", max_slots=1)
    with pytest.raises(PermissionDenied, match="only an admin"):
        pool_shares.clear_share(ctx, user, team, "default")
    assert [s.guaranteed_slots for s in pool_shares.shares_of(ctx, team)] == [1, 1]


def test_a_guarantee_is_taken_while_the_pool_size_is_unknown_and_a_lowered_one_always(master: Master) -> None:
    team, _ = master.add_workspace("T")
    # No agent has joined the pool yet: its size is not known, so nothing is refused.
    pool_shares.set_share(master.ctx, master.admin, team, "default", guaranteed_slots=8)
    master.add_agent("a1", slots=2)
    with pytest.raises(InvalidArgument, match="would add up to 9 slots, more than the 2 it has"):
        pool_shares.set_share(master.ctx, master.admin, team, "default", guaranteed_slots=9)
    pool_shares.set_share(master.ctx, master.admin, team, "default", guaranteed_slots=4)
    assert [s.guaranteed_slots for s in pool_shares.shares_of(master.ctx, team)] == [4]

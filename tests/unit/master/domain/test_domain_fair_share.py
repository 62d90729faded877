"""Fair share through the master (scheduling/fair_share_inputs.py, workspaces/pool_shares.py): a
pool whose config says `scheduler: {type: fair_share}` lends its idle slots to one workspace and
takes them back, by graceful preemption, when another workspace's work arrives; an admin's quota
caps a workspace; recent usage is decayed by the pool's half-life; weights and quotas are refused
naming the field (a priority pool's quotas: test_domain_pool_quotas.py)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from services.master.configuration.pools import PoolSettings
from services.master.domain.kernel.errors import InvalidArgument, NotFound, PermissionDenied
from services.master.domain.scheduling.fair_share_inputs import decayed_slot_seconds, share_groups
from services.master.domain.workspaces import pool_shares
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
    """A master whose only pool shares its slots fairly, and one agent of 2 slots."""
    master.close()
    fair = master.restarted(
        pools=[
            PoolSettings(
                "default", scheduler_type="fair_share", usage_half_life_s=3600, min_run_before_reclaim_s=0.0
            )
        ]
    )
    try:
        fair.add_agent("a1", slots=2)
        yield fair
    finally:
        fair.close()


def _ack_and_exit(master: Master, alloc: models.Allocation) -> None:
    with master.ctx.unit_of_work() as w:
        w.session.get_one(models.Allocation, alloc.id).preempt_acked = True
    (container,) = master.containers(alloc.id)
    master.exit(container.id, 0)


def test_idle_slots_are_lent_and_taken_back_when_another_workspace_comes(cluster: Master) -> None:
    _, team_a = cluster.add_workspace("A")
    _, team_b = cluster.add_workspace("B")
    searching = cluster.create(project_id=team_a, **SEARCH)
    lent = cluster.placed(searching)
    assert len(lent) == 2  # A alone borrows the whole pool
    for alloc in lent:
        cluster.run_containers(alloc.id)

    newcomer = cluster.create(project_id=team_b)
    (b_trial,) = cluster.trials(newcomer)
    assert cluster.live(b_trial.id).state == "PENDING"
    # B is entitled to one of the two slots: A's oldest placement is preempted, gracefully.
    asked = [a for a in lent if cluster.live(a.trial_id).preempt_requested]
    assert len(asked) == 1
    _ack_and_exit(cluster, cluster.live(asked[0].trial_id))
    assert cluster.live(b_trial.id).state == "ASSIGNED"
    # A keeps its share; its preempted trial waits for a slot, saying why.
    assert len(cluster.placed(searching)) == 1
    # The master keeps the scheduler's division of the pool for the API and /metrics.
    division = cluster.ctx.fair_shares.of("default")
    assert division is not None
    by_name = {g.name: (g.nominal, g.entitled, g.held, g.wanted) for g in division.workspaces}
    assert by_name["workspace 'B'"] == (1, 1, 1, 1)
    assert by_name["workspace 'A'"][:2] == (1, 1)


def test_a_quota_caps_a_workspace_even_with_idle_slots(cluster: Master) -> None:
    team, project = cluster.add_workspace("Capped")
    pool_shares.set_share(cluster.ctx, cluster.admin, team, "default", max_slots=1)
    searching = cluster.create(project_id=project, **SEARCH)
    assert len(cluster.placed(searching)) == 1
    waiting = cluster.scheduling.waiting.reasons
    assert any("workspace 'Capped' holds 1 slot of its maximum of 1" in why for why, _ in waiting.values())
    settings = pool_shares.shares_of(cluster.ctx, team)
    assert [(s.pool, s.user_id, s.max_slots, s.slots_in_use) for s in settings] == [("default", 0, 1, 1)]


def test_weights_and_quotas_are_refused_naming_the_field_and_set_only_by_an_admin(cluster: Master) -> None:
    team, _ = cluster.add_workspace("T")
    user = cluster.add_user("alice")
    ctx = cluster.ctx
    with pytest.raises(PermissionDenied, match="only an admin"):
        pool_shares.set_share(ctx, user, team, "default", max_slots=1)
    with pytest.raises(InvalidArgument, match="maxSlots: 0 to 100000"):
        pool_shares.set_share(ctx, cluster.admin, team, "default", max_slots=-1)
    with pytest.raises(InvalidArgument, match="guaranteedSlots: 5 is more than maxSlots 2"):
        pool_shares.set_share(ctx, cluster.admin, team, "default", guaranteed_slots=5, max_slots=2)
    with pytest.raises(InvalidArgument, match="weight: a number above 0"):
        pool_shares.set_share(ctx, cluster.admin, team, "default", weight=0.0)
    with pytest.raises(InvalidArgument, match="resourcePool: no resource pool 'gpus'"):
        pool_shares.set_share(ctx, cluster.admin, team, "gpus")
    with pytest.raises(NotFound, match="workspace 999 not found"):
        pool_shares.set_share(ctx, cluster.admin, 999, "default")
    with pytest.raises(NotFound, match="no weight or quota is set"):
        pool_shares.clear_share(ctx, cluster.admin, team, "default")
    assert [s.max_slots for s in pool_shares.shares_of(ctx, team)] == [0]
    pool_shares.set_share(
        ctx, cluster.admin, team, "default", user_id=user.user_id or 0, weight=2.0, max_slots=3
    )
    (_, user_row) = pool_shares.shares_of(ctx, team)
    assert (user_row.username, user_row.weight, user_row.max_slots) == ("alice", 2.0, 3)
    pool_shares.clear_share(ctx, cluster.admin, team, "default", user.user_id or 0)
    assert len(pool_shares.shares_of(ctx, team)) == 1


def test_recent_usage_decays_by_the_half_life_and_names_its_groups(cluster: Master) -> None:
    now = datetime(2026, 12, 2, 12, tzinfo=UTC)
    hour = 3600.0
    # Two slots for the last hour: 2 * h/ln2 * (1 - 1/2).
    recent = decayed_slot_seconds(2, now - timedelta(hours=1), None, now, hour)
    assert recent == pytest.approx(2 * hour / 0.6931471805599453 * 0.5)
    # The same hour a day ago counts 2^-23 as much.
    old = decayed_slot_seconds(2, now - timedelta(hours=25), now - timedelta(hours=24), now, hour)
    assert old == pytest.approx(recent * 2**-24)
    assert decayed_slot_seconds(1, now, now - timedelta(seconds=5), now, hour) == 0.0

    team, project = cluster.add_workspace("Busy")
    pool_shares.set_share(cluster.ctx, cluster.admin, team, "default", weight=3.0, guaranteed_slots=1)
    experiment_id = cluster.create(project_id=project)
    (trial,) = cluster.trials(experiment_id)
    cluster.run_containers(cluster.live(trial.id).id)
    with cluster.db.read() as s:
        groups = share_groups(s, cluster.ctx.settings.pools, datetime.now(UTC) + timedelta(minutes=10))
    workspaces_, users = groups["default"]
    (busy,) = [g for g in workspaces_ if g.key == str(team)]
    assert (busy.name, busy.weight, busy.guaranteed_slots) == ("workspace 'Busy'", 3.0, 1)
    assert busy.recent_slot_seconds > 500  # about ten minutes of one slot
    assert [u.name for u in users] == ["user 'admin' in workspace 'Busy'"]

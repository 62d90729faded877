"""One pool's provisioner against the master's domain (an in-process master on SQLite) and a
provider that keeps its instances in memory: launches are recorded before the provider is asked,
so a master that dies between the two asks again with the same id and nothing runs twice; idle
agents are drained, then terminated; provider failures show on the pool and back off."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from services.master.configuration.pools import PoolSettings
from services.master.configuration.provider import parse_provider
from services.master.domain.identity import agent_credentials
from services.master.domain.kernel.errors import PermissionDenied
from services.master.domain.provisioning.decide import Phase
from services.master.domain.provisioning.provider import (
    LaunchSpec,
    ProviderError,
    ProviderInstance,
    ProviderState,
)
from services.master.domain.provisioning.provisioner import PoolProvisioner
from services.master.gateway import prometheus
from services.master.store import models
from tests.unit.master.domain.harness import Master

CONFIG = parse_provider(
    {
        "type": "local",
        "min_instances": 0,
        "max_instances": 3,
        "max_idle_agent_period": "30s",
        "max_agent_starting_period": "60s",
    },
    "provider",
)


class MemoryProvider:
    """The provider contract over a dict: what a cloud would hold."""

    name = "memory"

    def __init__(self) -> None:
        self.instances: dict[str, ProviderState] = {}
        self.launches: list[str] = []
        self.specs: list[LaunchSpec] = []
        self.fail_with = ""

    def launch(self, spec: LaunchSpec) -> None:
        if self.fail_with:
            raise ProviderError(self.fail_with)
        self.launches.append(spec.instance_id)
        self.specs.append(spec)
        self.instances.setdefault(spec.instance_id, ProviderState.RUNNING)

    def list(self) -> list[ProviderInstance]:
        return [ProviderInstance(i, s) for i, s in self.instances.items()]

    def terminate(self, instance_id: str) -> None:
        if instance_id in self.instances:
            self.instances[instance_id] = ProviderState.STOPPED


@pytest.fixture
def master(tmp_path: Path) -> Master:
    return Master(tmp_path / "m", pools=[PoolSettings("default", provider=CONFIG)])


def rows(master: Master) -> dict[str, models.ProvisionedInstance]:
    with master.db.read() as s:
        return {r.id: r for r in s.scalars(select(models.ProvisionedInstance))}


def events(master: Master) -> list[tuple[str, str]]:
    with master.db.read() as s:
        return [
            (e.action, e.message)
            for e in s.scalars(select(models.ProvisionerEvent).order_by(models.ProvisionerEvent.id))
        ]


def test_work_launches_agents_that_are_retired_when_idle(master: Master) -> None:
    provider = MemoryProvider()
    provisioner = PoolProvisioner(master.ctx, "default", CONFIG, provider)
    master.create(
        searcher={"name": "random", "metric": "loss", "max_trials": 6, "max_length": {"batches": 1}},
        hyperparameters={"x": {"type": "double", "minval": 0, "maxval": 1}},
    )
    decision = provisioner.step(1000.0)
    assert decision is not None and decision.launch == 3
    launched = sorted(provider.launches)
    assert sorted(rows(master)) == launched
    assert {r.phase for r in rows(master).values()} == {Phase.LAUNCHING}
    assert (
        events(master)[0][0] == "launch" and "6 pending request(s) want 6 instance(s)" in events(master)[0][1]
    )

    # A second step before any agent connected launches nothing more (they are on the way).
    assert provisioner.step(1005.0).launch == 0  # type: ignore[union-attr]
    assert {r.phase for r in rows(master).values()} == {Phase.STARTING}

    for instance_id in launched:
        master.add_agent(instance_id)
    master.settle()
    provisioner.step(1010.0)
    assert {r.phase for r in rows(master).values()} == {Phase.RUNNING}
    assert len(provider.launches) == 3  # never twice

    # Nothing runs any more: idle agents are drained after 30 s, then terminated.
    with master.ctx.unit_of_work() as w:
        for alloc in w.session.scalars(select(models.Allocation)):
            alloc.state = "TERMINATED"
            alloc.placements = []
    provisioner.step(1020.0)  # idle from now
    assert {r.phase for r in rows(master).values()} == {Phase.RUNNING}
    scraped = prometheus.render(master.ctx)
    assert 'cairn_provisioned_instances{phase="RUNNING",pool="default"} 3' in scraped
    assert 'cairn_provisioner_launches_total{pool="default"} 3' in scraped
    assert 'cairn_provisioned_idle_seconds{pool="default"}' in scraped
    provisioner.step(1060.0)
    assert {r.phase for r in rows(master).values()} == {Phase.DRAINING}
    with master.db.read() as s:
        assert all(not a.enabled and a.draining for a in s.scalars(select(models.Agent)))
    provisioner.step(1065.0)
    assert {r.phase for r in rows(master).values()} == {Phase.TERMINATING}
    assert set(provider.instances.values()) == {ProviderState.STOPPED}
    provisioner.step(1070.0)
    assert {r.phase for r in rows(master).values()} == {Phase.GONE}
    assert [a for a, _ in events(master)].count("launch") == 3
    assert 'cairn_provisioner_terminations_total{pool="default"} 3' in prometheus.render(master.ctx)


def test_a_master_that_died_between_recording_and_launching_launches_the_same_ids(master: Master) -> None:
    provider = MemoryProvider()
    provider.fail_with = "the master died here"  # recorded, never launched
    first = PoolProvisioner(master.ctx, "default", CONFIG, provider)
    master.create()
    first.step(1000.0)
    recorded = sorted(rows(master))
    assert len(recorded) == 1 and provider.instances == {}
    provider.fail_with = ""
    restarted = PoolProvisioner(master.ctx, "default", CONFIG, provider)  # a new master
    restarted.step(1001.0)
    assert provider.launches == recorded and sorted(rows(master)) == recorded  # same id, once
    restarted.step(1002.0)
    assert provider.launches == recorded


def test_an_instance_no_record_knows_is_adopted_not_leaked(master: Master) -> None:
    provider = MemoryProvider()
    provider.instances["stray"] = ProviderState.RUNNING
    PoolProvisioner(master.ctx, "default", CONFIG, provider).step(1000.0)
    assert rows(master)["stray"].reason.startswith("adopted")


def test_provider_failures_show_on_the_pool_and_back_off(master: Master) -> None:
    provider = MemoryProvider()
    provider.fail_with = "InsufficientInstanceCapacity: no capacity in us-west-2a"
    provisioner = PoolProvisioner(master.ctx, "default", CONFIG, provider)
    master.create()
    provisioner.step(1000.0)
    assert "InsufficientInstanceCapacity" in provisioner.last_error
    assert events(master)[-1][0] == "error" and "retrying in 2 s" in events(master)[-1][1]
    assert provisioner.step(1001.0) is None  # within the backoff: not even a look
    provisioner.step(1002.5)
    assert "retrying in 4 s" in events(master)[-1][1]  # doubled
    provider.fail_with = ""
    provisioner.step(1007.0)
    assert provisioner.last_error == "" and len(provider.launches) == 1


def test_each_instance_gets_a_join_token_for_its_own_id(master: Master) -> None:
    provider = MemoryProvider()
    provisioner = PoolProvisioner(master.ctx, "default", CONFIG, provider)
    master.create(
        searcher={"name": "random", "metric": "loss", "max_trials": 2, "max_length": {"batches": 1}},
        hyperparameters={"x": {"type": "double", "minval": 0, "maxval": 1}},
    )
    provisioner.step(1000.0)
    first, second = provider.specs
    assert first.join_token and first.join_token != second.join_token
    assert first.join_token not in repr(first)  # never in a log line
    with pytest.raises(PermissionDenied, match=f"is for agent {first.instance_id}, not {second.instance_id}"):
        agent_credentials.enrol(master.ctx, second.instance_id, join_token=first.join_token)
    enrolled = agent_credentials.enrol(master.ctx, first.instance_id, join_token=first.join_token)
    assert enrolled.agent_id == first.instance_id

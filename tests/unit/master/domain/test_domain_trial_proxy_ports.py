"""A trial's proxy ports (its experiment's `environment.proxy_ports`), as Determined serves them:
`/proxy/{task id}:{port}/` reaches the port on the agent that runs the trial's chief (rank 0),
from the moment that container runs until the trial ends; a session is needed unless the port is
`unauthenticated`, and any logged-in user may use it (Determined asks only whether the caller may
view the experiment). A config with a port out of range, listed twice or with an unknown key is
refused naming the field, and nothing is stored."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select

from cairn.agent.v1 import agent_pb2 as apb
from services.common.principal import Principal
from services.master.domain.allocations import proxy_access
from services.master.domain.config.view import ProxyPort, config_view
from services.master.domain.kernel.errors import InvalidArgument, NotFound, Unauthenticated
from services.master.domain.kernel.task_ids import trial_task_id
from services.master.domain.reads import tasks as reads
from services.master.store import models
from tests.unit.master.domain.harness import Master

PORTS: list[dict[str, Any]] = [
    {"proxy_port": 8000},
    {"proxy_port": 6000, "proxy_tcp": True},
    {"proxy_port": 7000, "unauthenticated": True},
]


def experiment_with_ports(master: Master, *, slots: int = 1, ports: list[dict[str, Any]] = PORTS) -> str:
    """Creates the experiment; the task id of its one trial."""
    exp_id = master.create(environment={"proxy_ports": ports}, resources={"slots_per_trial": slots})
    (trial,) = master.trials(exp_id)
    return trial_task_id(exp_id, trial.request_id)


def target(master: Master, principal: Principal | None, service_id: str) -> proxy_access.ProxyTarget:
    with master.db.read() as s:
        return proxy_access.proxy_target(s, principal, service_id)


def experiment_count(master: Master) -> int:
    with master.db.read() as s:
        return int(s.scalar(select(func.count()).select_from(models.Experiment)) or 0)


def test_the_config_keeps_its_proxy_ports_with_determineds_defaults(master: Master) -> None:
    master.add_agent("a1")
    exp_id = master.create(environment={"proxy_ports": PORTS})
    view = config_view(master.experiment(exp_id).config)
    assert view.proxy_ports == (
        ProxyPort(port=8000, tcp=False, unauthenticated=False),
        ProxyPort(port=6000, tcp=True, unauthenticated=False),
        ProxyPort(port=7000, tcp=False, unauthenticated=True),
    )


@pytest.mark.parametrize(
    ("ports", "field"),
    [
        ([{"proxy_port": 0}], r"environment\.proxy_ports\[0\]\.proxy_port"),
        ([{"proxy_port": 65536}], r"environment\.proxy_ports\[0\]\.proxy_port"),
        ([{"proxy_port": "8000"}], r"environment\.proxy_ports\[0\]\.proxy_port"),
        ([{"proxy_tcp": True}], r"environment\.proxy_ports\[0\]\.proxy_port"),
        ([{"proxy_port": 8000, "proxy_tcp": "yes"}], r"environment\.proxy_ports\[0\]\.proxy_tcp"),
        ([{"proxy_port": 8000, "proxy_udp": True}], r"environment\.proxy_ports\[0\]\.proxy_udp"),
        (
            [{"proxy_port": 8000}, {"proxy_port": 9000}, {"proxy_port": 8000, "proxy_tcp": True}],
            r"environment\.proxy_ports\[2\]\.proxy_port: port 8000 is already listed at "
            r"environment\.proxy_ports\[0\]",
        ),
        ([{"proxy_port": 1000 + i} for i in range(65)], r"environment\.proxy_ports"),
    ],
)
def test_a_bad_proxy_port_is_refused_naming_the_field(
    master: Master, ports: list[dict[str, Any]], field: str
) -> None:
    with pytest.raises(InvalidArgument, match=field):
        master.create(environment={"proxy_ports": ports})
    assert experiment_count(master) == 0


def test_a_port_is_served_from_the_chiefs_agent_once_its_container_runs(master: Master) -> None:
    user = master.add_user("alice")
    master.add_agent("a1", address="10.1.2.3")
    task_id = experiment_with_ports(master)
    with pytest.raises(proxy_access.NotReady, match=rf"service {task_id}:8000 is not ready"):
        target(master, user, f"{task_id}:8000")
    master.run_containers(alloc_of(master, task_id))
    assert target(master, user, f"{task_id}:8000") == proxy_access.ProxyTarget("10.1.2.3:8000", tcp=False)
    assert target(master, user, f"{task_id}:6000") == proxy_access.ProxyTarget("10.1.2.3:6000", tcp=True)


def test_a_session_is_needed_unless_the_port_is_unauthenticated(master: Master) -> None:
    owner, other = master.add_user("alice"), master.add_user("bob")
    master.add_agent("a1", address="10.1.2.3")
    task_id = experiment_with_ports(master)
    master.run_containers(alloc_of(master, task_id))
    for port in (8000, 6000):
        with pytest.raises(Unauthenticated):
            target(master, None, f"{task_id}:{port}")
    assert target(master, None, f"{task_id}:7000").address == "10.1.2.3:7000"
    # Any logged-in user, as in Determined (who may view the experiment may open its ports).
    assert target(master, other, f"{task_id}:8000").address == "10.1.2.3:8000"
    assert target(master, owner, f"{task_id}:8000").address == "10.1.2.3:8000"


def test_an_unlisted_port_or_no_port_is_not_found(master: Master) -> None:
    user = master.add_user("alice")
    master.add_agent("a1", address="10.1.2.3")
    task_id = experiment_with_ports(master)
    master.run_containers(alloc_of(master, task_id))
    with pytest.raises(NotFound, match=rf"service {task_id}:9000"):
        target(master, user, f"{task_id}:9000")
    for bad in ("0", "65536", "80a", "", "０"):
        with pytest.raises(NotFound, match="is not a port"):
            target(master, user, f"{task_id}:{bad}")
    with pytest.raises(NotFound):
        target(master, user, "7.00000000-0000-0000-0000-000000000000:8000")
    # Without a session, an unknown service reads as one that needs a session: nothing is told.
    with pytest.raises(Unauthenticated):
        target(master, None, f"{task_id}:9000")


def test_a_zero_slot_trial_serves_its_ports(master: Master) -> None:
    user = master.add_user("alice")
    master.add_agent("a1", slots=0, address="10.9.9.9")
    task_id = experiment_with_ports(master, slots=0)
    master.run_containers(alloc_of(master, task_id))
    assert target(master, user, f"{task_id}:8000").address == "10.9.9.9:8000"


def test_only_the_chief_of_a_multi_agent_trial_is_proxied(master: Master) -> None:
    user = master.add_user("alice")
    master.add_agent("a1", slots=1, address="10.0.0.1")
    master.add_agent("a2", slots=1, address="10.0.0.2")
    task_id = experiment_with_ports(master, slots=2)
    alloc_id = alloc_of(master, task_id)
    chief, worker = master.containers(alloc_id)
    chief_address = {"a1": "10.0.0.1", "a2": "10.0.0.2"}[chief.agent_id]
    master.container_state(worker.id, apb.CONTAINER_STATE_RUNNING)  # the worker alone: nothing yet
    with pytest.raises(proxy_access.NotReady):
        target(master, user, f"{task_id}:8000")
    master.run_containers(alloc_id)
    assert target(master, user, f"{task_id}:8000").address == f"{chief_address}:8000"


def test_the_ports_are_gone_when_the_trial_ends(master: Master) -> None:
    user = master.add_user("alice")
    master.add_agent("a1", address="10.1.2.3")
    task_id = experiment_with_ports(master)
    alloc_id = alloc_of(master, task_id)
    (container_id,) = master.run_containers(alloc_id)
    assert target(master, None, f"{task_id}:7000").address == "10.1.2.3:7000"
    master.exit(container_id, 0)
    master.settle()
    for principal in (user, None):
        with pytest.raises(proxy_access.TaskEnded, match=rf"service {task_id}:7000: its trial has ended"):
            target(master, principal, f"{task_id}:7000")


def alloc_of(master: Master, task_id: str) -> str:
    with master.db.read() as s:
        alloc = s.scalars(
            select(models.Allocation)
            .where(models.Allocation.task_id == task_id)
            .order_by(models.Allocation.run_id.desc())
        ).first()
    assert alloc is not None
    return alloc.id


def test_the_task_list_shows_each_trials_ports(master: Master) -> None:
    master.add_agent("a1", address="10.1.2.3")
    task_id = experiment_with_ports(master)
    plain = master.create()
    with master.db.read() as s:
        tasks = list(s.scalars(select(models.Task)))
        ports = reads.trial_proxy_ports(s, tasks)
    assert ports == {task_id: config_view(master.experiment(int(task_id.split(".")[0])).config).proxy_ports}
    assert all(not t.startswith(f"{plain}.") for t in ports)

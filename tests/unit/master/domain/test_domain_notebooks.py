"""Notebooks are tasks that serve through the master's proxy: the master hands the task its port
and host, the task's own process reports it ready, and only then does the proxy resolve the task
to that address, for its owner or an admin, until it ends. A notebook idle for its idle_timeout
is killed."""

from __future__ import annotations

import pytest

from services.common.principal import Principal
from services.master.configuration.durations import parse_duration
from services.master.domain.allocations import proxy_access, task_services
from services.master.domain.kernel.errors import InvalidArgument, NotFound, PermissionDenied
from services.master.domain.kernel.idle_clock import IdleClock
from services.master.domain.kernel.states import TaskKind
from services.master.domain.task_kinds.notebook import NOTEBOOK, NOTEBOOK_ENTRYPOINT
from services.master.domain.tasks import notebook_idle, tasks
from services.master.store import models
from tests.unit.master.domain.harness import Master


def start(master: Master, principal: Principal | None = None, config: dict[str, object] | None = None) -> str:
    return master.launch(TaskKind.NOTEBOOK, config, principal)


def allocation(master: Master, task_id: str) -> models.Allocation:
    with master.db.read() as s:
        found = s.query(models.Allocation).filter_by(task_id=task_id).one()
        s.expunge(found)
        return found


def address(master: Master, principal: Principal, task_id: str) -> str:
    with master.db.read() as s:
        return proxy_access.proxy_address(s, principal, task_id)


def test_a_notebook_runs_jupyter_on_the_port_and_host_the_master_gives_it(master: Master) -> None:
    master.add_agent("a1", address="10.1.2.3")
    task_id = start(master, config={"resources": {"slots": 0}})
    alloc = allocation(master, task_id)
    (start_cmd,) = [c for _, c in master.hub.commands("start") if c.allocation_id == alloc.id]
    env = start_cmd.spec.environment
    assert tuple(start_cmd.spec.entrypoint) == NOTEBOOK_ENTRYPOINT
    port = task_services.service_port(master.ctx, alloc.port_offset or 0)
    assert (env["CAIRN_SERVICE_HOST"], env["CAIRN_SERVICE_PORT"], env["NOTEBOOK_PORT"]) == (
        "10.1.2.3",
        str(port),
        str(port),
    )
    assert 31400 <= port < 32768  # below the ephemeral ports, apart from the meeting ports


def test_a_notebook_entrypoint_cannot_be_replaced() -> None:
    with pytest.raises(InvalidArgument, match=r"config\.entrypoint"):
        NOTEBOOK.config_for({"entrypoint": "rm -rf /"}, {})


def test_the_proxy_resolves_a_notebook_only_once_it_reports_ready(master: Master) -> None:
    master.add_agent("a1")
    task_id = start(master)
    alloc = allocation(master, task_id)
    master.run_containers(alloc.id)
    with pytest.raises(proxy_access.NotReady, match="not ready"):
        address(master, master.admin, task_id)
    task_services.report_ready(master.ctx, Principal(allocation_id=alloc.id), alloc.id)
    expected = f"127.0.0.1:{task_services.service_port(master.ctx, alloc.port_offset or 0)}"
    assert allocation(master, task_id).proxy_address == expected
    assert allocation(master, task_id).is_ready
    assert address(master, master.admin, task_id) == expected


def test_only_the_allocation_itself_reports_it_ready(master: Master) -> None:
    master.add_agent("a1")
    alloc = allocation(master, start(master))
    with pytest.raises(PermissionDenied, match="allocation_id"):
        task_services.report_ready(master.ctx, Principal(allocation_id="another.1"), alloc.id)
    with pytest.raises(PermissionDenied, match="allocation_id"):
        task_services.report_ready(master.ctx, master.admin, alloc.id)


def test_the_proxy_serves_the_owner_and_admins_only(master: Master) -> None:
    master.add_agent("a1")
    someone = master.add_user("someone")
    task_id = start(master, someone)
    alloc = allocation(master, task_id)
    master.run_containers(alloc.id)
    task_services.report_ready(master.ctx, Principal(allocation_id=alloc.id), alloc.id)
    assert address(master, someone, task_id) == address(master, master.admin, task_id)
    with pytest.raises(PermissionDenied, match="another user"):
        address(master, master.add_user("other"), task_id)
    with pytest.raises(NotFound, match="no task"):
        address(master, master.admin, "no-such-task")


def test_the_proxy_refuses_a_notebook_once_it_has_ended(master: Master) -> None:
    master.add_agent("a1")
    task_id = start(master)
    alloc = allocation(master, task_id)
    (container,) = master.run_containers(alloc.id)
    task_services.report_ready(master.ctx, Principal(allocation_id=alloc.id), alloc.id)
    with master.ctx.unit_of_work() as w:
        tasks.kill(master.ctx, w, tasks.load(w, task_id))
    master.settle()
    master.exit(container, 143)
    with pytest.raises(proxy_access.TaskEnded, match="has ended"):
        address(master, master.admin, task_id)


def test_idle_timeouts_are_durations_checked_at_start(master: Master) -> None:
    assert parse_duration("1h30m", "f") == 5400 and parse_duration("45s", "f") == 45
    assert parse_duration(90, "f") == 90 and parse_duration("250ms", "f") == 0.25
    for bad in ("soon", "10", "-5s", 0, True):
        with pytest.raises(InvalidArgument, match=r"config\.idle_timeout"):
            NOTEBOOK.config_for({"idle_timeout": bad}, {})
    with pytest.raises(InvalidArgument, match=r"config\.notebook_idle_type"):
        NOTEBOOK.config_for({"idle_timeout": "5m", "notebook_idle_type": "sleepy"}, {})


def test_a_notebook_idle_for_its_idle_timeout_is_killed(master: Master) -> None:
    clock = [1000.0]
    master.ctx.idle_clock = IdleClock(now=lambda: clock[0])
    master.add_agent("a1")
    task_id = start(master, config={"idle_timeout": "30s", "notebook_idle_type": "kernel_connections"})
    alloc = allocation(master, task_id)
    (start_cmd,) = [c for _, c in master.hub.commands("start") if c.allocation_id == alloc.id]
    assert start_cmd.spec.environment["CAIRN_NOTEBOOK_IDLE_TYPE"] == "kernel_connections"
    master.run_containers(alloc.id)
    own = Principal(allocation_id=alloc.id)
    with pytest.raises(PermissionDenied, match="notebook_id"):
        notebook_idle.report_idle(master.ctx, Principal(allocation_id="other.1"), task_id, True)

    notebook_idle.report_idle(master.ctx, own, task_id, True)
    clock[0] += 20
    notebook_idle.report_idle(master.ctx, own, task_id, False)  # busy again: the idle time starts over
    clock[0] += 20
    notebook_idle.report_idle(master.ctx, own, task_id, True)
    clock[0] += 29
    notebook_idle.report_idle(master.ctx, own, task_id, True)
    with master.db.read() as s:
        assert s.get_one(models.Task, task_id).state == "ACTIVE"
    clock[0] += 1
    notebook_idle.report_idle(master.ctx, own, task_id, True)
    master.settle()
    with master.db.read() as s:
        assert s.get_one(models.Task, task_id).state == "STOPPING_CANCELED"
    assert [k.container_id for _, k in master.hub.commands("kill")] == [f"{alloc.id}.0"]


def test_a_notebook_without_an_idle_timeout_never_times_out(master: Master) -> None:
    master.ctx.idle_clock = IdleClock(now=lambda: 0.0)
    master.add_agent("a1")
    task_id = start(master)
    alloc = allocation(master, task_id)
    (start_cmd,) = [c for _, c in master.hub.commands("start") if c.allocation_id == alloc.id]
    assert "CAIRN_NOTEBOOK_IDLE_TYPE" not in start_cmd.spec.environment
    master.run_containers(alloc.id)
    notebook_idle.report_idle(master.ctx, Principal(allocation_id=alloc.id), task_id, True)
    with master.db.read() as s:
        assert s.get_one(models.Task, task_id).state == "ACTIVE"

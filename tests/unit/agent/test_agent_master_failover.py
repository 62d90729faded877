"""An agent given several master addresses (an active master and a standby) follows a failover:
its running container keeps running and reports to the new leader, nothing lost or repeated."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from services.agent.containers.task_env import MasterFacts
from services.agent.settings import parse_settings
from tests.support.ports import free_port
from tests.unit.agent.agent_master_double import MasterServer, MasterStore, wait_until
from tests.unit.agent.agent_processes import AgentProcess, python_command, wait_terminated


def test_agent_moves_to_the_standby_when_the_active_master_dies(
    store: MasterStore, launch_agent: Callable[..., AgentProcess]
) -> None:
    active = MasterServer(store, ack=False)
    standby_port = free_port()
    # The standby's port is closed until it leads; the agent starts with both addresses.
    agent = launch_agent(f"{active.address},127.0.0.1:{standby_port}")
    active.double.wait_connected()
    lines = 60
    active.double.start(
        "f1",
        python_command(
            "import time\n"
            f"for i in range({lines}):\n"
            "    print(f'line {i}', flush=True)\n"
            "    time.sleep(0.03)\n"
        ),
    )
    wait_until(lambda: len(store.lines("f1")) >= 10, 10, "some lines at the active master")
    active.stop()

    standby = MasterServer(store, port=standby_port)
    try:
        stream = standby.double.wait_connected(timeout=20)
        assert stream.hello.reconnect is True
        assert [c.container_id for c in stream.hello.containers] == ["f1"]
        wait_terminated(store, "f1", timeout=20)
        wait_until(lambda: len(store.lines("f1")) == lines, 5, "every line")
        assert store.messages("f1") == [f"line {i}" for i in range(lines)]
        seqs = store.all_seqs("f1")
        assert seqs == list(range(1, len(seqs) + 1))
        final = store.final("f1")
        assert final is not None and final.exit_code == 0
        assert agent.proc.poll() is None
    finally:
        standby.stop()


def test_trial_code_gets_every_master_address_and_determined_variables_name_the_first() -> None:
    facts = MasterFacts("10.0.0.1:8090,10.0.0.2:8090", http_port=8080)
    assert facts.host == "10.0.0.1"
    assert facts.rest_url == "http://10.0.0.1:8080"


def test_the_master_flag_takes_several_addresses_each_with_a_port() -> None:
    settings = parse_settings(["--master", "10.0.0.1:8090,10.0.0.2:9090", "--agent-id", "a1"])
    assert settings.master == "10.0.0.1:8090,10.0.0.2:9090"
    with pytest.raises(SystemExit):
        parse_settings(["--master", "10.0.0.1:8090,10.0.0.2", "--agent-id", "a1"])

"""A real agent with `--runtime docker` against a master double: states, the two output streams,
exit codes, kills (SIGTERM, then SIGKILL after the grace), bad configurations and reattachment.
Needs dockerd and the task image (tests/support/docker_env.py: skipped, saying why, without)."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest

from cairn.agent.v1 import agent_pb2 as apb
from cairn.agent_files import DOCKER_LABEL_CONTAINER_ID, DOCKER_LABEL_WORK_DIR
from services.agent.runtime.docker_engine import DockerEngine
from tests.support.docker_env import task_image  # noqa: F401 (fixture)
from tests.unit.agent.agent_master_double import MasterServer, MasterStore, wait_until
from tests.unit.agent.agent_processes import AgentProcess, shim_pid, wait_terminated

PRINT_AND_EXIT_3 = (
    "import sys, time\n"
    "print('out 1', flush=True)\n"
    "print('err 1', file=sys.stderr, flush=True)\n"
    "time.sleep(0.05)\n"
    "print('out 2', flush=True)\n"
    "print('WARNING: err 2', file=sys.stderr, flush=True)\n"
    "sys.exit(3)\n"
)


def containers_of(work_dir: Path) -> list[dict[str, object]]:
    client = docker.from_env(timeout=30)
    try:
        return list(
            client.api.containers(
                all=True, filters={"label": f"{DOCKER_LABEL_WORK_DIR}={work_dir.resolve()}"}
            )
        )
    finally:
        client.close()


@pytest.fixture
def docker_agent(
    task_image: str,  # noqa: F811
    tmp_path: Path,
    master: MasterServer,
    launch_agent: Callable[..., AgentProcess],
) -> Iterator[Callable[[], AgentProcess]]:
    def launch() -> AgentProcess:
        return launch_agent(master.address, "--runtime", "docker", "--default-image", task_image)

    yield launch
    # Whatever a failed test left behind (the agent's own tests check what it leaves).
    for work_dir in tmp_path.glob("work-*"):
        client = docker.from_env(timeout=30)
        engine = DockerEngine(client)
        for container in containers_of(work_dir):
            engine.remove(str(container["Id"]))  # the agent's supervisor may be removing it too
        client.close()


def start(
    master: MasterServer,
    container_id: str,
    code: str,
    config: dict[str, object] | None = None,
    entrypoint: list[str] | None = None,
) -> None:
    master.double.send(
        apb.MasterMessage(
            start=apb.StartContainer(
                command_id=f"start-{container_id}",
                container_id=container_id,
                allocation_id=f"alloc-{container_id}",
                slot_ids=["0"],
                spec=apb.TaskSpec(
                    entrypoint=entrypoint or ["python3", "-u", "-c", code],
                    kill_grace_seconds=1,
                    container_config=json.dumps(config or {}),
                ),
            )
        )
    )


def test_a_failing_container_reports_its_two_streams_and_exit_code(
    master: MasterServer, store: MasterStore, docker_agent: Callable[[], AgentProcess]
) -> None:
    agent = docker_agent()
    master.double.wait_connected()
    start(master, "c1", PRINT_AND_EXIT_3)
    wait_terminated(store, "c1", timeout=60)

    assert store.states_of("c1") == ["ASSIGNED", "STARTING", "RUNNING", "TERMINATED"]
    final = store.final("c1")
    assert final is not None
    assert (final.exit_code, final.failure_type) == (3, apb.FAILURE_TYPE_CONTAINER_FAILED)
    wait_until(lambda: len(store.lines("c1")) == 4, 5, "four lines")
    lines = store.lines("c1")
    by_type = {t: [e.message for e in lines if e.stdtype == t] for t in ("stdout", "stderr")}
    assert by_type == {"stdout": ["out 1", "out 2"], "stderr": ["err 1", "WARNING: err 2"]}
    assert [e.level for e in lines if e.message == "WARNING: err 2"] == ["WARNING"]
    seqs = store.all_seqs("c1")
    assert seqs == list(range(1, len(seqs) + 1))
    # The supervisor removes the container once its end is written down.
    wait_until(lambda: not containers_of(agent.work_dir), 10, "the container's removal")


def test_kill_sends_sigterm_then_sigkill_after_the_grace(
    master: MasterServer, store: MasterStore, docker_agent: Callable[[], AgentProcess]
) -> None:
    docker_agent()
    master.double.wait_connected()
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: print('ignoring SIGTERM', flush=True))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    start(master, "c2", code)
    wait_until(lambda: "ready" in store.messages("c2"), 60, "the command to be ready")
    sent = time.monotonic()
    master.double.send(
        apb.MasterMessage(kill=apb.KillContainer(command_id="kill-c2", container_id="c2", grace_seconds=1))
    )
    wait_terminated(store, "c2", timeout=30)
    took = time.monotonic() - sent
    final = store.final("c2")
    assert final is not None
    assert (final.exit_code, final.failure_type) == (137, apb.FAILURE_TYPE_KILLED)
    assert 0.9 <= took < 6, took
    assert "ignoring SIGTERM" in store.messages("c2")


def test_a_bad_configuration_ends_the_container_naming_the_field(
    master: MasterServer, store: MasterStore, docker_agent: Callable[[], AgentProcess]
) -> None:
    docker_agent()
    master.double.wait_connected()
    start(master, "c3", "print(1)", {"resources": {"shm_size": "lots"}})
    wait_terminated(store, "c3", timeout=30)
    final = store.final("c3")
    assert final is not None
    assert final.failure_type == apb.FAILURE_TYPE_TASK_ERROR
    assert final.message.startswith("resources.shm_size:")


@pytest.mark.parametrize("supervisor", ["survives", "dies too"])
def test_a_restarted_agent_reattaches_and_ships_every_line_once(
    supervisor: str, master: MasterServer, store: MasterStore, docker_agent: Callable[[], AgentProcess]
) -> None:
    agent = docker_agent()
    master.double.wait_connected()
    code = (
        "import sys, time\n"
        "for i in range(40):\n"
        "    print(f'line {i}', flush=True)\n"
        "    print(f'eline {i}', file=sys.stderr, flush=True)\n"
        "    time.sleep(0.1)\n"
    )
    start(master, "c4", code)
    wait_until(lambda: "line 5" in store.messages("c4"), 60, "the first lines")
    # The agent dies (and maybe the container's supervisor); the container runs on, and writes.
    agent.proc.kill()
    agent.proc.wait(10)
    if supervisor == "dies too":
        os.kill(shim_pid(agent.container("c4")), signal.SIGKILL)
    (container,) = containers_of(agent.work_dir)
    assert container["Labels"][DOCKER_LABEL_CONTAINER_ID] == "c4"  # type: ignore[index]
    time.sleep(1)

    docker_agent()
    wait_terminated(store, "c4", timeout=60)
    final = store.final("c4")
    assert final is not None
    assert (final.exit_code, final.failure_type) == (0, apb.FAILURE_TYPE_UNSPECIFIED)
    lines = store.lines("c4")
    assert [e.message for e in lines if e.stdtype == "stdout"] == [f"line {i}" for i in range(40)]
    assert [e.message for e in lines if e.stdtype == "stderr"] == [f"eline {i}" for i in range(40)]
    notes = [e.message for e in store.lines("c4", source=None) if e.source == "agent"]
    # Without its supervisor, the restarted agent found the container by its labels.
    reattached = "supervisor restarted: reattached to the running container" in notes
    assert reattached == (supervisor == "dies too")
    wait_until(lambda: not containers_of(agent.work_dir), 10, "the container's removal")


def test_a_command_the_image_lacks_ends_the_container_with_127_and_the_reason(
    master: MasterServer, store: MasterStore, docker_agent: Callable[[], AgentProcess]
) -> None:
    agent = docker_agent()
    master.double.wait_connected()
    start(master, "c5", "", entrypoint=["no-such-command", "--flag"])
    wait_terminated(store, "c5", timeout=60)
    final = store.final("c5")
    assert final is not None
    # The container's init could not exec it: as a shell says, 127, and why in the log.
    assert (final.exit_code, final.failure_type) == (127, apb.FAILURE_TYPE_CONTAINER_FAILED)
    assert any("no-such-command" in line and "No such file" in line for line in store.messages("c5"))
    wait_until(lambda: not containers_of(agent.work_dir), 10, "the container's removal")


def test_a_container_docker_cannot_start_ends_with_its_reason_and_is_removed(
    master: MasterServer, store: MasterStore, docker_agent: Callable[[], AgentProcess]
) -> None:
    agent = docker_agent()
    master.double.wait_connected()
    start(master, "c6", "print(1)", {"resources": {"devices": ["/dev/cairn-no-such-device"]}})
    wait_terminated(store, "c6", timeout=60)
    final = store.final("c6")
    assert final is not None
    assert final.failure_type == apb.FAILURE_TYPE_TASK_ERROR
    assert final.message.startswith("cannot start the container:")
    assert "/dev/cairn-no-such-device" in final.message
    wait_until(lambda: not containers_of(agent.work_dir), 10, "the container's removal")

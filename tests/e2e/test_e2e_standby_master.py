"""A standby master (PostgreSQL only): a second master started against the cluster's database waits
on the leader lease with its ports closed; when the active master is killed (-9) mid-search it takes
over within 15 s, the agents and the trials' Core API follow it (they were given both addresses),
and the search completes with every metric step stored exactly once and no trial restarted."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from cairn.api.v1 import agent_pb2, api_pb2_grpc, auth_pb2
from cairn.client.address import parse_master_addresses
from cairn.client.password import salt_and_hash
from cairn.localcluster.processes import spawn
from tests.e2e.helpers import (
    config,
    create,
    ledger,
    logs,
    run_cairn,
    stored_metrics,
    trial_state,
    trials,
    wait_state,
)
from tests.support.cluster import TEST_ENV, AuthedStub, TestCluster
from tests.support.databases import fresh_database
from tests.support.polling import wait_for
from tests.support.ports import free_port

TAKEOVER_LIMIT_S = 15.0


def _accepts(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


class Standby:
    """A second master: the active master's recorded command on other ports."""

    def __init__(self, cluster: TestCluster, grpc_port: int, http_port: int) -> None:
        record = cluster.record
        assert record is not None
        command = list(cluster.process("master").command)
        for option, value in (("--port", grpc_port), ("--http-port", http_port)):
            command[command.index(option) + 1] = str(value)
        self.ready_file = cluster.state_dir / "standby-master.ready.json"
        command[command.index("--ready-file") + 1] = str(self.ready_file)
        self.log_path = cluster.state_dir / "logs" / "standby-master.log"
        env = {**os.environ, **TEST_ENV, **cluster.extra_env, "CAIRN_CLUSTER_TOKEN": record.cluster_token}
        self.process: subprocess.Popen[bytes] = spawn(command, self.log_path, env)
        self.grpc_port = grpc_port

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


@pytest.fixture
def two_masters(tmp_path: Path) -> Iterator[tuple[TestCluster, Standby]]:
    with fresh_database("postgres", tmp_path) as db_url:
        standby_grpc, standby_http = free_port(), free_port()
        cluster = TestCluster(
            tmp_path / "cluster", db_url, agents=1, slots=2, standby_masters=(f"127.0.0.1:{standby_grpc}",)
        )
        cluster.start()
        standby: Standby | None = None
        try:
            standby = Standby(cluster, standby_grpc, standby_http)
            yield cluster, standby
        finally:
            if standby is not None:
                standby.stop()
            cluster.stop()


def _login(addresses: str) -> tuple[AuthedStub, grpc.Channel]:
    channel = grpc.insecure_channel(parse_master_addresses(addresses).dial_target)
    request = auth_pb2.LoginRequest(username="determined", password=salt_and_hash(""), is_hashed=True)
    token = api_pb2_grpc.CairnStub(channel).Login(request, timeout=30).token
    return AuthedStub(channel, token), channel


def test_the_standby_takes_over_mid_search_and_nothing_is_lost(
    two_masters: tuple[TestCluster, Standby],
) -> None:
    cluster, standby = two_masters
    addresses = f"{cluster.address},127.0.0.1:{standby.grpc_port}"
    api, channel = _login(addresses)
    try:
        waiting = "waiting for the leader lease"
        wait_for(lambda: waiting in standby.log(), timeout=60, what="the standby to wait")
        # A standby serves nothing: clients and agents that try it are refused and move on.
        assert not _accepts(standby.grpc_port) and not standby.ready_file.exists()

        text = config(
            hyperparameters={
                "steps": 12,
                "step_s": 0.25,
                "ckpt_every": 4,
                "scale": {"type": "double", "minval": 0.5, "maxval": 2.0},
            },
            searcher={
                "name": "random",
                "metric": "validation_loss",
                "max_trials": 4,
                "max_concurrent_trials": 2,
                "max_length": {"batches": 12},
            },
        )
        experiment_id = create(api, text)
        # Killed while two trials run and report.
        wait_for(
            lambda: (
                sum(len(stored_metrics(api, t.id, "training")) >= 3 for t in trials(api, experiment_id)) == 2
            ),
            timeout=120,
            what="two trials reporting",
        )

        cluster.kill("master", signal.SIGKILL)
        killed_at = time.monotonic()
        wait_for(standby.ready_file.exists, timeout=TAKEOVER_LIMIT_S + 15, what="the standby to serve")
        took = time.monotonic() - killed_at
        assert took <= TAKEOVER_LIMIT_S, f"the standby took {took:.1f} s to take over"
        assert "won the leader lease" in standby.log()

        # The same channel (over both addresses) reaches the new leader; its session is in the database.
        wait_state(api, experiment_id, "COMPLETED", timeout=240)
        found = trials(api, experiment_id)
        assert len(found) == 4
        for trial in found:
            assert trial_state(trial) == "COMPLETED"
            # Kept running through the failover: the same run, never restarted.
            assert trial.restarts == 0 and trial.run_id == 1, trial.id
            said = ledger(logs(api, trial.id))
            for group in ("training", "validation"):
                stored = [(m.total_batches, m.trial_run_id) for m in stored_metrics(api, trial.id, group)]
                assert Counter(stored) == Counter(said[group]), (trial.id, group)
            assert [steps for steps, _ in said["training"]] == list(range(1, 13)), trial.id
        agents = api.GetAgents(agent_pb2.GetAgentsRequest()).agents
        assert [a.connected for a in agents] == [True]
        # The CLI given both addresses reaches the new leader; the dead master is skipped.
        env = {**os.environ, "CAIRN_MASTER": addresses, "CAIRN_CONFIG_DIR": str(cluster.state_dir / "cli")}
        listed = subprocess.run(
            [sys.executable, "-m", "cairn.cli.main", "experiment", "list", "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert listed.returncode == 0, listed.stdout + listed.stderr
        experiments = json.loads(listed.stdout)["experiments"]
        assert [(e["id"], e["state"]) for e in experiments] == [(experiment_id, "STATE_COMPLETED")]
    finally:
        channel.close()


def _cairn(env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = run_cairn(env, *args, stdin="\n", timeout=180)
    assert not check or done.returncode == 0, f"cairn {' '.join(args)}: {done.stdout}{done.stderr}"
    return done


def _pids_of(state_dir: Path) -> list[int]:
    found = subprocess.run(["pgrep", "-f", str(state_dir)], capture_output=True, text=True, check=False)
    return [int(pid) for pid in found.stdout.split()]


def test_cluster_up_runs_a_standby_that_takes_over_and_the_watchdog_makes_a_new_one(tmp_path: Path) -> None:
    """What a user gets from `cairn cluster up --standby-masters 1`: status shows one master serving
    and one waiting; after kill -9 of the active one the standby serves within 15 s, the watchdog
    starts the killed one again as the new standby, the CLI given every address follows, and
    `cluster down` leaves nothing."""
    with fresh_database("postgres", tmp_path) as db_url:
        assert db_url is not None
        state_dir = tmp_path / "state"
        env = {
            **os.environ,
            **TEST_ENV,
            "CAIRN_STATE_DIR": str(state_dir),
            "CAIRN_CONFIG_DIR": str(tmp_path / "config"),
            "CAIRN_MASTER": "",
        }
        refused = _cairn(env, "cluster", "up", "--standby-masters", "1", "--master-port", "0", check=False)
        assert refused.returncode != 0 and "need PostgreSQL" in refused.stderr
        up = ["cluster", "up", "--standby-masters", "1", "--db-url", db_url, "--agents", "1"]
        _cairn(env, *up, "--master-port", "0", "--http-port", "0")
        try:

            def masters() -> dict[str, str]:
                shown = json.loads(_cairn(env, "cluster", "status", "--json", check=False).stdout)
                env["CAIRN_MASTER"] = ",".join(shown["masters"])
                return {p["name"]: p["health"] for p in shown["processes"] if p["name"].startswith("master")}

            assert masters() == {
                "master": "SERVING",
                "master-standby-1": "STANDBY (waiting for the leader lease)",
            }
            _cairn(env, "user", "login", "determined", "--password-stdin")
            record = json.loads((state_dir / "cluster.json").read_text())
            (active,) = [p["pid"] for p in record["processes"] if p["name"] == "master"]
            os.kill(active, signal.SIGKILL)
            killed_at = time.monotonic()
            wait_for(
                lambda: masters().get("master-standby-1") == "SERVING",
                timeout=TAKEOVER_LIMIT_S + 15,
                what="the standby to serve",
            )
            assert time.monotonic() - killed_at <= TAKEOVER_LIMIT_S
            # The watchdog starts the killed master again; it now waits as the standby.
            wait_for(
                lambda: masters().get("master") == "STANDBY (waiting for the leader lease)",
                timeout=60,
                what="the killed master to come back as a standby",
            )
            agents = json.loads(_cairn(env, "agent", "list", "--json").stdout)["agents"]
            wait_for(
                lambda: (
                    [
                        a["connected"]
                        for a in json.loads(_cairn(env, "agent", "list", "--json").stdout)["agents"]
                    ]
                    == [True]
                ),
                timeout=60,
                what="the agent to reach the new leader",
            )
            assert [a["id"] for a in agents] == ["agent-1"]
        finally:
            _cairn(env, "cluster", "down", check=False)
        assert not _pids_of(state_dir), "processes left behind after cluster down"

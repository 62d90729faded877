"""Dynamic agents: how long an experiment waits for a freshly provisioned agent, and how many slot
seconds the provisioner leaves idle over a bursty workload against a fixed cluster sized for its
peak.

Start: a pool with no agents (min_instances 0); each run creates a one-trial experiment whose code
prints its start time first thing, and the latency is that time minus the moment the request was
sent. Between runs the agent is retired (idle period 2 s), so every run provisions a new one.
With --providers local,docker the docker provider runs agents as containers of the service image
(`make images`) and trials in the task image (`make task-image`).

Bursty: --waves waves of --burst one-second trials, a wave every --gap seconds, on a pool of at most
--burst one-slot agents. Provisioned slot-seconds are each instance's life (launch to retirement)
times its slots, read from the master's records; busy slot-seconds are the trials' run times. The
fixed cluster for comparison has --burst slots for the whole run, from the first wave's creation
to the last trial's end.

    .venv/bin/python -m bench.provisioning [--runs 5] [--providers local] [--waves 4 --burst 4 --gap 20]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from bench.cairn_cluster import Api, cairn_cluster
from bench.launch_latency import first_line_time
from cairn.api.v1 import trial_pb2

HERE = Path(__file__).parent
START_CONFIG = """
name: provisioned-start
entrypoint: python3 first_line.py
searcher: {name: single, metric: loss}
max_restarts: 0
"""
BURST_CONFIG = """
name: burst
entrypoint: python3 sleep_trial.py
hyperparameters: {x: {type: categorical, vals: %s}}
searcher: {name: grid, metric: loss, max_length: {batches: 1}}
max_restarts: 0
"""


def provider_config(provider: str, max_agents: int, idle: str) -> dict[str, object]:
    block: dict[str, object] = {
        "type": provider,
        "min_instances": 0,
        "max_instances": max_agents,
        "max_idle_agent_period": idle,
        "max_agent_starting_period": "120s",
    }
    task_env = Path(__file__).resolve().parents[1] / ".venv-task"
    if provider == "local":
        block["agent_args"] = ["--task-env", f"cairn-task={task_env}"]
    else:
        from cairn import service_image, task_image

        block["agent_docker_image"] = service_image.image_tag()
        block["agent_args"] = ["--default-image", task_image.image_tag()]
    return {"resource_pools": [{"pool_name": "default", "provider": block}]}


def wait_no_agents(api: Api, timeout: float = 120) -> None:
    from cairn.api.v1 import agent_pb2

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not api.GetAgents(agent_pb2.GetAgentsRequest()).agents:
            return
        time.sleep(0.2)
    raise TimeoutError("the idle agents were not retired")


def start_latencies(api: Api, runs: int) -> list[float]:
    latencies = []
    for _ in range(runs):
        wait_no_agents(api)
        sent = time.time()
        experiment_id = api.create(START_CONFIG, HERE / "trials" / "first_line")
        api.wait_terminal(experiment_id, timeout=300)
        latencies.append(first_line_time(api, experiment_id) - sent)
    return latencies


def busy_seconds(api: Api, experiment_ids: list[int]) -> tuple[float, float, float]:
    """(slot-seconds the trials ran, first creation, last end) from the trials' own times."""
    busy, first, last = 0.0, float("inf"), 0.0
    for experiment_id in experiment_ids:
        trials = api.GetExperimentTrials(
            trial_pb2.GetExperimentTrialsRequest(experiment_id=experiment_id)
        ).trials
        for trial in trials:
            start, end = trial.start_time.ToDatetime().timestamp(), trial.end_time.ToDatetime().timestamp()
            busy += end - start
            first, last = min(first, start), max(last, end)
    return busy, first, last


def provisioned_seconds(state_dir: Path, slots: int, until: float) -> float:
    (database,) = list(state_dir.rglob("*.db"))[:1]
    with sqlite3.connect(database) as db:
        rows = db.execute("SELECT launched_at, ended_at FROM provisioned_instances").fetchall()
    total = 0.0
    for launched, ended in rows:
        start = _epoch(launched)
        end = _epoch(ended) if ended else until
        total += max(0.0, end - start) * slots
    return total


def _epoch(text: str) -> float:
    from datetime import UTC, datetime

    value = datetime.fromisoformat(str(text))
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()


def bursty(api: Api, state_dir: Path, waves: int, burst: int, gap: float) -> dict[str, float]:
    created = time.time()
    ids = []
    for wave in range(waves):
        vals = json.dumps([round(0.1 * i + wave, 3) for i in range(burst)])
        ids.append(api.create(BURST_CONFIG % vals, HERE / "trials" / "sleep_trial"))
        if wave < waves - 1:
            time.sleep(gap)
    for experiment_id in ids:
        api.wait_terminal(experiment_id, timeout=600)
    busy, _first, last_end = busy_seconds(api, ids)
    wait_no_agents(api)
    provisioned = provisioned_seconds(state_dir, 1, time.time())
    fixed = burst * (last_end - created)
    return {
        "busy_slot_s": round(busy, 1),
        "provisioned_slot_s": round(provisioned, 1),
        "provisioned_idle_slot_s": round(provisioned - busy, 1),
        "fixed_cluster_slot_s": round(fixed, 1),
        "fixed_cluster_idle_slot_s": round(fixed - busy, 1),
        "makespan_s": round(last_end - created, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--providers", default="local")
    parser.add_argument("--waves", type=int, default=4)
    parser.add_argument("--burst", type=int, default=4)
    parser.add_argument("--gap", type=float, default=20.0)
    parser.add_argument("--idle", default="2s", help="max_idle_agent_period")
    args = parser.parse_args()
    result: dict[str, object] = {"load_average": os.getloadavg()[0]}
    for provider in args.providers.split(","):
        with tempfile.TemporaryDirectory(prefix="cairn-bench-provision-") as tmp:
            state_dir = Path(tmp) / "cluster"
            state_dir.mkdir()
            config = Path(tmp) / "master.yaml"
            config.write_text(yaml.safe_dump(provider_config(provider, args.burst, args.idle)))
            env = {"CAIRN_MASTER_CONFIG": str(config), "CAIRN_PROVISIONER_PERIOD": "0.5"}
            with cairn_cluster(state_dir, agents=0, slots=1, extra_env=env) as api:
                latencies = sorted(start_latencies(api, args.runs))
                entry: dict[str, object] = {
                    "start_median_s": round(statistics.median(latencies), 2),
                    "start_max_s": round(latencies[-1], 2),
                    "start_min_s": round(latencies[0], 2),
                }
                if args.waves > 0:
                    entry["bursty"] = bursty(api, state_dir, args.waves, args.burst, args.gap)
                result[provider] = entry
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

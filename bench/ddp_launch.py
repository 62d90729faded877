"""DDP launch: the digits DDP example (examples/digits-distributed) at two ranks, launched by Cairn
against the same script under plain torchrun on the same machine, runs interleaved.

Two topologies, each like for like: one agent with two slots against `torchrun --nproc_per_node 2`,
and two agents with one slot each against two `torchrun --nnodes 2 --nproc_per_node 1` launches
meeting on loopback. Measured from the script's own TIMING lines (rank 0):
  * time to first step: from the moment the client sends CreateExperiment (Cairn), or the launcher
    process is spawned (torchrun), to the end of the first training step;
  * steps per second of the training loop (forward, backward, DDP all-reduce, optimizer step).

    .venv/bin/python -m bench.ddp_launch [--runs 3] [--epochs 40] [--hidden 256] [--report-every 1]

Cairn's trials run in the task environment (.venv-task), where torchrun comes from too.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench.cairn_cluster import cairn_cluster
from cairn.api.v1 import trial_pb2

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "digits-distributed"
TASK_BIN = REPO / ".venv-task" / "bin"


def parse_timing(lines: list[str]) -> tuple[float, float]:
    """(unix time of the end of the first step, steps per second) from the script's output."""
    first = rate = None
    for line in lines:
        if "TIMING first_step_at=" in line:
            first = float(line.split("first_step_at=")[1].split()[0])
        if "steps_per_s=" in line:
            rate = float(line.split("steps_per_s=")[1].split()[0])
    if first is None or rate is None:
        raise RuntimeError("no TIMING lines in the output:\n" + "\n".join(lines[-30:]))
    return first, rate


def config(epochs: int, hidden: int, report_every: int) -> str:
    text = (EXAMPLE / "distributed.yaml").read_text()
    text = text.replace("epochs: 15", f"epochs: {epochs}").replace(
        "hidden_size: 64", f"hidden_size: {hidden}"
    )
    return text.replace("hyperparameters:\n", f"hyperparameters:\n  report_every: {report_every}\n")


def cairn_run(api, epochs: int, hidden: int, every: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    sent = time.time()
    experiment_id = api.create(config(epochs, hidden, every), EXAMPLE)
    state = api.wait_terminal(experiment_id, timeout=900)
    if state != "COMPLETED":
        raise RuntimeError(f"experiment {experiment_id} ended {state}")
    trial_id = (
        api.GetExperimentTrials(trial_pb2.GetExperimentTrialsRequest(experiment_id=experiment_id))
        .trials[0]
        .id
    )
    lines = [e.message for e in api.TrialLogs(trial_pb2.TrialLogsRequest(trial_id=trial_id))]
    first, rate = parse_timing(lines)
    return first - sent, rate


def torchrun_run(nodes: int, epochs: int, hidden: int, every: int, port: int) -> tuple[float, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CAIRN_", "DET_", "VIRTUAL_ENV"))}
    env.update(
        {
            "PATH": f"{TASK_BIN}{os.pathsep}{env.get('PATH', '')}",
            "CAIRN_COLLECTIVES_PORT": str(port + 1),
        }
    )
    torchrun = str(TASK_BIN / "torchrun")
    script = ["train.py", "--epochs", str(epochs), "--hidden-size", str(hidden), "--report-every", str(every)]
    if nodes == 1:
        commands = [[torchrun, "--nproc_per_node", "2", *script]]
    else:
        commands = [
            [
                torchrun,
                "--nnodes",
                "2",
                "--node_rank",
                str(rank),
                "--nproc_per_node",
                "1",
                "--master_addr",
                "127.0.0.1",
                "--master_port",
                str(port),
                *script,
            ]
            for rank in range(2)
        ]
    spawned = time.time()
    processes = [
        subprocess.Popen(c, cwd=EXAMPLE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for c in commands
    ]
    outputs = [p.communicate(timeout=900)[0] for p in processes]
    if any(p.returncode for p in processes):
        raise RuntimeError("torchrun failed:\n" + "\n".join(o[-3000:] for o in outputs))
    first, rate = parse_timing(outputs[0].splitlines())
    return first - spawned, rate


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--report-every", type=int, default=1, help="epochs between the chief's reports")
    args = parser.parse_args()
    results: dict[str, dict[str, object]] = {}
    for agents, slots in ((1, 2), (2, 1)):
        name = f"{agents}x{slots}"
        cairn: list[tuple[float, float]] = []
        plain: list[tuple[float, float]] = []
        with (
            tempfile.TemporaryDirectory() as state,
            cairn_cluster(Path(state), agents=agents, slots=slots) as api,
        ):
            cairn_run(api, 2, args.hidden, 1)  # warm-up: page cache, first imports
            for run in range(args.runs):
                every = args.report_every
                plain.append(torchrun_run(agents, args.epochs, args.hidden, every, 29700 + 2 * run))
                cairn.append(cairn_run(api, args.epochs, args.hidden, every))
        first_cairn = statistics.median(c[0] for c in cairn)
        first_plain = statistics.median(p[0] for p in plain)
        rate_cairn = statistics.median(c[1] for c in cairn)
        rate_plain = statistics.median(p[1] for p in plain)
        results[name] = {
            "cairn_first_step_s": round(first_cairn, 3),
            "torchrun_first_step_s": round(first_plain, 3),
            "first_step_extra_s": round(first_cairn - first_plain, 3),
            "cairn_steps_per_s": round(rate_cairn, 1),
            "torchrun_steps_per_s": round(rate_plain, 1),
            "steps_per_s_ratio": round(rate_cairn / rate_plain, 3),
            "runs": {"cairn": cairn, "torchrun": plain},
        }
    settings = {"epochs": args.epochs, "hidden": args.hidden, "report_every": args.report_every}
    print(json.dumps({**settings, "results": results}, indent=2))


if __name__ == "__main__":
    main()

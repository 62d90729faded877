"""Where a warm trial's turnover goes: N one-second trials on 2 slots (bench/trial_overhead.py's
`cairn_warm`), each stamping its script's start, its Core API up, its report and its Core API's
close; the master's database adds when each allocation was placed and when its end was recorded.
For every trial that followed another on the same slot, the chain from the predecessor's last
line to the successor's first, in ms (median, p10, p90):

    .venv/bin/python -m bench.handover_chain [--trials 40] [--runs 1]

Nothing inside Cairn is instrumented: what a step of the agent or the master costs beyond these
marks needs stamps of its own (bench/README.md, "Where a hand-over's time goes").
"""

from __future__ import annotations

import argparse
import itertools
import json
import sqlite3
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from bench.cairn_cluster import cairn_cluster
from cairn.localcluster.paths import ClusterPaths

HERE = Path(__file__).parent
SLOTS = 2


def run(trials: int) -> dict[str, object]:
    # Outside /tmp: each isolated trial has a private one. The task user creates it; /var/tmp's
    # sticky bit lets it append and us read.
    stamps = Path("/var/tmp") / f"cairn-bench-stamps-{uuid.uuid4().hex[:8]}.txt"
    config = f"""
name: handover-chain
entrypoint: python3 stamp_trial.py
hyperparameters:
  x: {{type: double, minval: 0.0, maxval: 1.0}}
searcher: {{name: random, metric: loss, max_trials: {trials}, max_concurrent_trials: 16}}
max_restarts: 0
environment: {{preload_modules: [], environment_variables: [STAMPS={stamps}]}}
"""
    try:
        with tempfile.TemporaryDirectory() as state:
            with cairn_cluster(Path(state), agents=1, slots=SLOTS) as api:
                created = time.time()
                experiment_id = api.create(config, HERE / "trials" / "stamp_trial")
                outcome = api.wait_terminal(experiment_id)
                finished = time.time()
            rows = _allocations(ClusterPaths(Path(state)).master_dir / "cairn.db")
        marks = {
            int(parts[0]): [float(p) for p in parts[1:]]
            for parts in (line.split() for line in stamps.read_text().splitlines())
        }
    finally:
        stamps.unlink(missing_ok=True)
    return {"state": outcome, **_chain(marks, rows, created, finished, trials)}


def _allocations(db: Path) -> dict[int, tuple[str, float, float]]:
    """trial id -> (its slot, when its allocation was placed, when its end was recorded)."""

    def seconds(text: str) -> float:
        return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()

    with sqlite3.connect(db) as conn:
        found = conn.execute(
            "SELECT trial_id, placements, assigned_at, end_time FROM allocations WHERE trial_id IS NOT NULL"
        ).fetchall()
    return {
        trial_id: (json.dumps(json.loads(placements)[0], sort_keys=True), seconds(assigned), seconds(ended))
        for trial_id, placements, assigned, ended in found
    }


def _chain(
    marks: dict[int, list[float]],
    rows: dict[int, tuple[str, float, float]],
    created: float,
    finished: float,
    trials: int,
) -> dict[str, object]:
    by_slot: dict[str, list[int]] = {}
    for trial_id in sorted(marks, key=lambda t: marks[t][0]):
        by_slot.setdefault(rows[trial_id][0], []).append(trial_id)
    steps: dict[str, list[float]] = {
        "predecessor's close -> successor placed": [],
        "successor placed -> its first line": [],
        "predecessor's close -> its end recorded": [],
        "predecessor's close -> successor's first line": [],
    }
    for order in by_slot.values():
        for before, after in itertools.pairwise(order):
            end = marks[before][3]
            steps["predecessor's close -> successor placed"].append(rows[after][1] - end)
            steps["successor placed -> its first line"].append(marks[after][0] - rows[after][1])
            steps["predecessor's close -> its end recorded"].append(rows[before][2] - end)
            steps["predecessor's close -> successor's first line"].append(marks[after][0] - end)
    steps["Core API start"] = [m[1] - m[0] for m in marks.values()]
    steps["report and Core API close"] = [m[3] - m[2] for m in marks.values()]
    summary: dict[str, object] = {name: _spread(values) for name, values in steps.items() if values}
    summary["create -> first line"] = round((min(m[0] for m in marks.values()) - created) * 1000, 1)
    summary["last end -> experiment ended"] = round((finished - max(m[3] for m in marks.values())) * 1000, 1)
    wall = finished - created
    summary["overhead per trial (s)"] = round((wall - trials / SLOTS) / (trials / SLOTS), 3)
    return summary


def _spread(values: list[float]) -> str:
    ordered = sorted(v * 1000 for v in values)
    p10, p90 = ordered[len(ordered) // 10], ordered[len(ordered) * 9 // 10]
    return f"median {statistics.median(ordered):.1f}, p10 {p10:.1f}, p90 {p90:.1f} (n={len(ordered)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    for _ in range(args.runs):
        print(json.dumps(run(args.trials), indent=1))


if __name__ == "__main__":
    main()

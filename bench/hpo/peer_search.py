"""Runs a peer's search (Optuna or Ray Tune) in the benchmark venv and reads back its record.

The peers live in .venv-bench (`make bench-install`, plus torch and scikit-learn for the task);
their scripts import this package from the repository root. Optuna gets a fresh PostgreSQL database
on the local server for each run, dropped afterwards.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import psycopg2

from bench.hpo.record import RunRecord, read_record
from services.common.logging import get_logger

log = get_logger(__name__)
REPO = Path(__file__).resolve().parents[2]
BENCH_PYTHON = REPO / ".venv-bench" / "bin" / "python"
OPTUNA_PRUNERS = {"optuna_tpe_sha": "sha", "optuna_tpe_hyperband": "hyperband"}


def _run_peer(module: str, out: Path, timeout_s: float, *args: str) -> RunRecord:
    if not BENCH_PYTHON.exists():
        raise SystemExit("the peers need .venv-bench: run `make bench-install` first")
    command = [str(BENCH_PYTHON), "-m", module, *args, "--out", str(out)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout_s, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{module} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return read_record(out)


def run_optuna(system: str, seed: int, budget: float, out: Path, timeout_s: float) -> RunRecord:
    database = f"optuna_hpo_{uuid.uuid4().hex[:8]}"
    admin = psycopg2.connect(dbname="postgres")
    admin.autocommit = True
    try:
        with admin.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE {database}")
        return _run_peer(
            "bench.hpo.peers.optuna_search",
            out,
            timeout_s,
            "--pruner",
            OPTUNA_PRUNERS[system],
            "--seed",
            str(seed),
            "--budget",
            str(budget),
            "--storage",
            f"postgresql+psycopg2:///{database}",
        )
    finally:
        with admin.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        admin.close()


def run_ray(seed: int, budget: float, out: Path, timeout_s: float) -> RunRecord:
    return _run_peer(
        "bench.hpo.peers.ray_search", out, timeout_s, "--seed", str(seed), "--budget", str(budget)
    )

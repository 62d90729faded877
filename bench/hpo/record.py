"""One run of one system with one seed, as written to bench/hpo/results/<system>-seed<N>.json.

Runners in both environments (.venv for Cairn, .venv-bench for the peers) write the same shape, so
the report reads them all alike. Reports are stored compactly: [trial, epoch, error, seconds since
the run started].
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.hpo.accounting import EpochReport

# Why a run ended: its consumed budget passed the benchmark's budget, or the search ended first.
ENDED_BY_BUDGET = "budget"
ENDED_BY_SEARCH = "search"


@dataclass
class RunRecord:
    system: str
    seed: int
    budget: float
    max_epochs: int
    wall_s: float
    trials: int
    ended_by: str
    reports: list[EpochReport]
    # Anything system-specific worth keeping (the searcher section, pruner settings, versions).
    settings: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        start = min((r.wall_time for r in self.reports), default=0.0)
        header = {
            "system": self.system,
            "seed": self.seed,
            "budget": self.budget,
            "max_epochs": self.max_epochs,
            "wall_s": round(self.wall_s, 1),
            "trials": self.trials,
            "ended_by": self.ended_by,
            "settings": self.settings,
        }
        rows = [
            [r.trial, r.epoch, round(r.error, 5), round(r.wall_time - start, 3)]
            for r in sorted(self.reports, key=lambda r: (r.wall_time, r.trial, r.epoch))
        ]
        # One report per line keeps the committed files readable and their diffs small.
        head = json.dumps(header, indent=1)[:-2]
        lines = ",\n  ".join(json.dumps(row) for row in rows)
        return f'{head},\n "reports": [\n  {lines}\n ]\n}}\n'

    @classmethod
    def from_json(cls, text: str) -> RunRecord:
        body = json.loads(text)
        return cls(
            system=str(body["system"]),
            seed=int(body["seed"]),
            budget=float(body["budget"]),
            max_epochs=int(body["max_epochs"]),
            wall_s=float(body["wall_s"]),
            trials=int(body["trials"]),
            ended_by=str(body["ended_by"]),
            settings=dict(body.get("settings") or {}),
            reports=[
                EpochReport(trial=str(t), epoch=int(e), error=float(err), wall_time=float(w))
                for t, e, err, w in body["reports"]
            ],
        )


def record_path(out_dir: Path, system: str, seed: int) -> Path:
    return out_dir / f"{system}-seed{seed}.json"


def write_record(path: Path, record: RunRecord) -> None:
    # Written whole, then renamed: an interrupted run leaves no half file that would look done.
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(record.to_json())
    partial.replace(path)


def read_record(path: Path) -> RunRecord:
    return RunRecord.from_json(path.read_text())

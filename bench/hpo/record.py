"""One run of one system with one seed, as written to bench/hpo/results/<system>-seed<N>.json.

Runners in both environments (.venv for Cairn, .venv-bench for the peers) write the same shape, so
the report reads them all alike. Reports are stored compactly: [trial, epoch, error, seconds since
the run started] (in records written before 2026-12-04: since the first report). Each trial's
hyperparameters are kept too (not in those older records): the systems draw different
configurations, whose epochs cost different amounts of CPU, and bench.hpo.price prices them so that
two runs' times can be compared on the work they did.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.hpo.accounting import EpochReport, epochs_for

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
    # trial -> its hyperparameters, in task.Hyperparameters' names (the six of the search space).
    hparams: dict[str, dict[str, Any]] = field(default_factory=dict)
    # time.time() when the run started (the clock the reports' wall_time is on): a run's wall ends
    # where its runner noticed the budget spent, which for Cairn's (a poll every POLL_S) is a few
    # epochs after; the time to the budget's last epoch is the same measure for every system. None
    # in records written before 2026-12-04; 0.0 once read back (report times are then since it).
    started_at: float | None = None

    @property
    def budget_s(self) -> float | None:
        """Seconds from the run's start to the report that spent its budget; None when the record
        has no start or the run ended before spending it."""
        spent = epochs_for(self.budget, self.max_epochs)
        if self.started_at is None or spent < 1 or len(self.reports) < spent:
            return None
        return self.budget_reports()[-1].wall_time - self.started_at

    def budget_reports(self) -> list[EpochReport]:
        """The reports in measured order, up to the one that spent the budget (all of them when the
        run ended first)."""
        ordered = sorted(self.reports, key=lambda r: (r.wall_time, r.trial, r.epoch))
        return ordered[: epochs_for(self.budget, self.max_epochs)]

    def to_json(self) -> str:
        if self.started_at is not None:
            start = self.started_at
        else:
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
        if self.started_at is not None:
            header["reports_from"] = "start"
        rows = [
            [r.trial, r.epoch, round(r.error, 5), round(r.wall_time - start, 3)]
            for r in sorted(self.reports, key=lambda r: (r.wall_time, r.trial, r.epoch))
        ]
        # One report per line keeps the committed files readable and their diffs small.
        head = json.dumps(header, indent=1)[:-2]
        lines = ",\n  ".join(json.dumps(row) for row in rows)
        configs = ",\n  ".join(
            f"{json.dumps(trial)}: {json.dumps(values, sort_keys=True)}"
            for trial, values in sorted(self.hparams.items(), key=lambda item: _trial_order(item[0]))
        )
        return f'{head},\n "hparams": {{\n  {configs}\n }},\n "reports": [\n  {lines}\n ]\n}}\n'

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
            hparams={str(trial): dict(values) for trial, values in (body.get("hparams") or {}).items()},
            started_at=0.0 if body.get("reports_from") == "start" else None,
            reports=[
                EpochReport(trial=str(t), epoch=int(e), error=float(err), wall_time=float(w))
                for t, e, err, w in body["reports"]
            ],
        )


# The search space's whole-number hyperparameters, which some systems hand back as floats (a
# protobuf Struct holds only doubles).
_WHOLE_NUMBERS = ("width", "depth", "batch_size")
SEARCH_SPACE_NAMES = ("learning_rate", "weight_decay", "width", "depth", "dropout", "batch_size")


def plain_hparams(values: Mapping[str, Any]) -> dict[str, Any]:
    """A trial's six hyperparameters as the record keeps them (other keys, such as a seed, left
    out): whole numbers as ints, the rest as floats."""
    return {
        name: int(values[name]) if name in _WHOLE_NUMBERS else float(values[name])
        for name in SEARCH_SPACE_NAMES
        if name in values
    }


def _trial_order(trial: str) -> tuple[int, int | str]:
    # Numeric ids (Cairn's, Optuna's) in number order, others (Ray's) by name.
    return (0, int(trial)) if trial.isdigit() else (1, trial)


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

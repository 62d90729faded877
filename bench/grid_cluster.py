"""The in-process cluster the pass benches fill (bench.scheduling_pass, bench.trial_phases): the
domain tests' harness master, `agents` agents of `slots` slots, and one grid experiment of `trials`
one-slot trials of max_length 1, its first pass settled. The harness's comparison of the scheduling
view with a whole read of the database is off: it is the tests' check, not the master's work."""

from __future__ import annotations

from pathlib import Path

from tests.unit.master.domain.harness import Master, config_text


def grid_cluster(state_dir: Path, agents: int, slots: int, trials: int, db_url: str | None = None) -> Master:
    master = Master(state_dir, db_url=db_url)
    if master.scheduling.view is not None:
        master.scheduling.view.check = False
    for i in range(agents):
        master.add_agent(f"agent-{i}", slots=slots)
    master.create(
        config_text(
            searcher={"name": "grid", "metric": "loss", "max_length": 1, "max_concurrent_trials": 0},
            hyperparameters={"x": {"type": "int", "minval": 0, "maxval": trials - 1, "count": trials}},
        )
    )
    return master

"""Early hand-over on a real cluster: a trial whose Core API closed cleanly tells the master as its
process exits, and the next trial is placed on its slots while the process is still ending; the
agent starts the next one's command only once that container has ended."""

from __future__ import annotations

from tests.e2e.helpers import config, create, logs, trial_state, trials, wait_state
from tests.support.cluster import TestCluster


def stamp(lines: list[str], word: str) -> float:
    [line] = [x for x in lines if x.startswith(word + " ")]
    return float(line.split()[1])


def test_the_next_trial_is_placed_while_the_last_exits_and_runs_after_it(cluster: TestCluster) -> None:
    api = cluster.login()
    text = config(
        # Both trials need both of the agent's slots: they run one after the other, on the same slots.
        resources={"slots_per_trial": 2},
        hyperparameters={
            "steps": 2,
            "step_s": 0.05,
            "exit_linger_s": 1.5,
            "x": {"type": "categorical", "vals": [1, 2]},
        },
        searcher={"name": "grid", "metric": "validation_loss", "max_length": {"batches": 2}},
    )
    experiment_id = create(api, text)
    wait_state(api, experiment_id, "COMPLETED", timeout=120)
    first, second = sorted(trials(api, experiment_id), key=lambda t: t.id)
    assert trial_state(first) == trial_state(second) == "COMPLETED"
    first_lines, second_lines = logs(api, first.id), logs(api, second.id)
    # The second was placed during the first's 1.5 s exit, and waited for it to end...
    waiting = [x for x in second_lines if "waiting for the slot's previous container to exit" in x]
    assert waiting, second_lines
    # ...then ran: never beside it.
    assert stamp(second_lines, "STARTED") >= stamp(first_lines, "LINGERED")

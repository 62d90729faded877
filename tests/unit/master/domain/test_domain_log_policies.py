"""Log policies (Determined's `log_policies`): a trial's log lines matching a `cancel_retries`
policy make its next failure final; matching an `exclude_node` policy keeps its later runs off the
agent whose line matched (waiting, queued, when no other agent is left). A line that matches
nothing changes nothing, and a bad policy is refused at creation naming its field."""

from __future__ import annotations

from typing import Any

import pytest

from cairn.agent.v1 import agent_pb2 as apb
from services.master.domain.config import log_policies
from services.master.domain.experiments.experiment_edits import replace_config
from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.metrics.logs import LogFilter, LogStore, read_logs
from services.master.store import models
from tests.unit.master.domain.harness import Master

PATTERN = r"executing.*action.*exit.*code.*7"


def _say(master: Master, store: LogStore, agent_id: str, trial_id: int, *messages: str) -> None:
    (container,) = master.run_containers(master.live(trial_id).id)
    store.store(
        agent_id,
        apb.LogBatch(
            entries=[
                apb.LogEntry(container_id=container, seq=seq, message=m) for seq, m in enumerate(messages, 1)
            ]
        ),
    )
    master.exit(container, 7)
    master.settle()


def _policies(action: Any, pattern: str = PATTERN) -> list[dict[str, Any]]:
    return [{"name": "exit 7", "pattern": pattern, "action": action}]


def _trial_log(master: Master, trial_id: int) -> str:
    lines = read_logs(
        master.ctx,
        LogFilter(trial_id=trial_id),
        limit=0,
        descending=False,
        follow=False,
        is_done=lambda: True,
    )
    return "\n".join(line.message for line in lines)


@pytest.mark.parametrize("should_match", [True, False])
def test_cancel_retries_makes_the_failure_final(master: Master, should_match: bool) -> None:
    master.add_agent("a1")
    pattern = PATTERN if should_match else r"(.*) this should not match (.*)"
    experiment_id = master.create(log_policies=_policies({"type": "cancel_retries"}, pattern), max_restarts=1)
    (trial,) = master.trials(experiment_id)
    store = LogStore(master.ctx)
    _say(master, store, "a1", trial.id, "executing action: exit code 7")
    (trial,) = master.trials(experiment_id)
    if should_match:
        assert (trial.state, trial.restarts, trial.log_policy_no_retry) == ("ERROR", 0, True)
        assert master.experiment(experiment_id).state == "ERROR"
        assert "trial failed and matched logs to a don't retry policy" in _trial_log(master, trial.id)
    else:
        assert (trial.state, trial.restarts) == ("ACTIVE", 1)
        assert "don't retry policy" not in _trial_log(master, trial.id)


def test_exclude_node_keeps_the_next_run_off_the_agent_and_waits_without_another(master: Master) -> None:
    master.add_agent("a1")
    experiment_id = master.create(log_policies=_policies({"type": "exclude_node"}), max_restarts=1)
    (trial,) = master.trials(experiment_id)
    store = LogStore(master.ctx)
    _say(master, store, "a1", trial.id, "executing action: exit code 7")
    (trial,) = master.trials(experiment_id)
    assert (trial.state, trial.restarts, trial.excluded_agents) == ("ACTIVE", 1, ["a1"])
    assert "therefore will not schedule on a1" in _trial_log(master, trial.id)
    # The only agent is excluded: the next run waits, queued, as on Determined.
    assert master.live(trial.id).state == "PENDING"
    # Another agent joins: the run goes there, never to a1.
    master.add_agent("a2")
    master.settle()
    placed = master.live(trial.id)
    assert placed.state != "PENDING"
    assert [p["agent_id"] for p in placed.placements] == ["a2"]


def test_a_replaced_config_s_policies_match_the_lines_of_the_runs_after_it(master: Master) -> None:
    """Continuing an experiment may bring new policies (experiment_edits.replace_config bumps the
    config's version): the policies compiled for the old version are not used for the new runs."""
    master.add_agent("a1")
    experiment_id = master.create(
        log_policies=_policies({"type": "cancel_retries"}, r"(.*) this should not match (.*)"), max_restarts=2
    )
    (trial,) = master.trials(experiment_id)
    store = LogStore(master.ctx)
    _say(master, store, "a1", trial.id, "executing action: exit code 7")
    (trial,) = master.trials(experiment_id)
    assert (trial.state, trial.restarts) == ("ACTIVE", 1)  # no policy matched: restarted
    with master.ctx.unit_of_work() as w:
        exp = w.session.get_one(models.Experiment, experiment_id)
        replace_config(exp, {**exp.config, "log_policies": _policies({"type": "cancel_retries"})})
    _say(master, store, "a1", trial.id, "executing action: exit code 7")
    (trial,) = master.trials(experiment_id)
    assert (trial.state, trial.restarts, trial.log_policy_no_retry) == ("ERROR", 1, True)


def test_bad_policies_are_refused_naming_the_field(master: Master) -> None:
    with pytest.raises(InvalidArgument, match=r"log_policies\[0\]\.pattern"):
        master.create(log_policies=_policies({"type": "cancel_retries"}, pattern="(unclosed"))
    with pytest.raises(InvalidArgument, match=r"log_policies\[0\]\.action"):
        master.create(log_policies=_policies({"type": "reboot"}))


def test_policies_parse_in_each_shape_determined_writes() -> None:
    shapes = [
        {"pattern": "x", "action": {"type": "cancel_retries"}},
        {"pattern": "x", "action": "exclude_node"},
        {"pattern": "x", "actions": [{"type": "cancel_retries"}, {"type": "exclude_node"}]},
        {"pattern": "x"},  # no action: does nothing
    ]
    parsed = log_policies.parse(shapes)
    assert [sorted(p.actions) for p in parsed] == [
        ["cancel_retries"],
        ["exclude_node"],
        ["cancel_retries", "exclude_node"],
    ]

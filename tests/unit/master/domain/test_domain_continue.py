"""`det experiment continue`: an ended single-trial experiment resumes its trial in place with the
override merged in and ends again; every refusal changes nothing (state, config, trial, searcher)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml
from sqlalchemy import select

from services.common.principal import Principal
from services.master.domain.experiments import continuation, creation, experiments
from services.master.domain.kernel.errors import FailedPrecondition, InvalidArgument, PermissionDenied
from services.master.domain.kernel.states import InvalidTransition, check_experiment, check_trial
from services.master.domain.metrics import signals
from services.master.domain.task_kinds.model_definition import ContextFile
from services.master.store import models
from tests.unit.master.domain.harness import Master, config_text

LONGER = "searcher: {max_length: {batches: 20}}"
GRID = {
    "searcher": {"name": "grid", "metric": "loss", "max_length": {"batches": 10}},
    "hyperparameters": {"x": {"type": "categorical", "vals": [1, 2]}},
}


def _run_to_end(master: Master, experiment_id: int) -> None:
    """Every live trial of the experiment runs and exits 0."""
    for trial in master.trials(experiment_id):
        live = [a for a in master.allocations(trial.id) if a.state != "TERMINATED"]
        for alloc in live:
            for container_id in master.run_containers(alloc.id):
                master.exit(container_id, 0)


def _user(master: Master, username: str) -> Principal:
    with master.db.read() as s:
        user = s.scalar(select(models.User).where(models.User.username == username))
        assert user is not None
        return Principal(user_id=user.id, username=user.username, admin=user.admin)


def _snapshot(master: Master, experiment_id: int) -> tuple[Any, ...]:
    exp = master.experiment(experiment_id)
    trials = [(t.id, t.state, t.restarts, t.run_id) for t in master.trials(experiment_id)]
    return (
        exp.state,
        json.dumps(exp.config, sort_keys=True),
        exp.config_version,
        exp.searcher_session_id,
        exp.end_time,
        trials,
        len(master.searchers.searcher.sessions),
    )


def test_continue_resumes_the_trial_in_place_and_it_trains_to_the_new_length(master: Master) -> None:
    master.add_agent("a1")
    experiment_id = master.create()
    (trial,) = master.trials(experiment_id)
    with master.ctx.unit_of_work() as w:
        w.session.get_one(models.Trial, trial.id).latest_checkpoint_uuid = "ckpt-at-10"
    _run_to_end(master, experiment_id)
    assert master.experiment(experiment_id).state == "COMPLETED"
    assert master.trials(experiment_id)[0].state == "COMPLETED"
    before = master.experiment(experiment_id)

    continuation.continue_experiment(master.ctx, master.admin, experiment_id, LONGER)
    master.settle()

    exp = master.experiment(experiment_id)
    assert exp.state == "ACTIVE" and exp.end_time is None
    assert exp.config["searcher"]["max_length"] == {"batches": 20}
    assert exp.config_version == before.config_version + 1
    assert exp.searcher_session_id != before.searcher_session_id
    (resumed,) = master.trials(experiment_id)
    assert (resumed.id, resumed.state, resumed.end_time, resumed.restarts) == (trial.id, "ACTIVE", None, 0)
    # The same trial runs again (its second run), from its latest checkpoint, with the new length.
    alloc = master.live(trial.id)
    assert alloc.run_id == 2
    (start,) = [cmd for _agent, cmd in master.hub.commands("start") if cmd.allocation_id == alloc.id]
    env = start.spec.environment
    assert env["DET_LATEST_CHECKPOINT"] == "ckpt-at-10"
    assert json.loads(env["DET_EXPERIMENT_CONFIG"])["searcher"]["max_length"] == {"batches": 20}
    assert signals.current_operation(master.ctx, Principal(user_id=1), trial.id, wait_s=0).length == 20

    _run_to_end(master, experiment_id)
    assert master.experiment(experiment_id).state == "COMPLETED"
    assert [t.state for t in master.trials(experiment_id)] == ["COMPLETED"]
    assert len(master.trials(experiment_id)) == 1  # no second trial was made

    # And again: a continued experiment can be continued.
    continuation.continue_experiment(master.ctx, master.admin, experiment_id, "")
    master.settle()
    assert master.experiment(experiment_id).state == "ACTIVE"
    assert master.live(trial.id).run_id == 3


def test_a_canceled_experiment_continues_too(master: Master) -> None:
    master.add_agent("a1")
    experiment_id = master.create()
    (trial,) = master.trials(experiment_id)
    with master.ctx.unit_of_work() as w:
        experiments.kill(master.ctx, w, experiments.load(w, experiment_id))
    master.settle()
    for container in master.containers(master.live(trial.id).id):
        master.exit(container.id, 137)
    assert master.experiment(experiment_id).state == "CANCELED"

    continuation.continue_experiment(master.ctx, master.admin, experiment_id, "max_restarts: 3")
    master.settle()
    assert master.experiment(experiment_id).state == "ACTIVE"
    assert master.experiment(experiment_id).config["max_restarts"] == 3
    assert master.live(trial.id).state == "ASSIGNED"


def test_reopening_is_a_move_only_continue_makes() -> None:
    # activate, a searcher's answer or an allocation's end never revive an ended run.
    for ended in ("COMPLETED", "CANCELED", "ERROR"):
        with pytest.raises(InvalidTransition):
            check_experiment(ended, "ACTIVE")  # type: ignore[arg-type]
        with pytest.raises(InvalidTransition):
            check_trial(ended, "ACTIVE")  # type: ignore[arg-type]
        check_experiment(ended, "ACTIVE", continuing=True)  # type: ignore[arg-type]
        check_trial(ended, "ACTIVE", continuing=True)  # type: ignore[arg-type]
    with pytest.raises(InvalidTransition):
        check_experiment("PAUSED", "ACTIVE", continuing=True)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("override", "error", "named"),
    [
        ("hyperparameters: {lr: 0.5}", InvalidArgument, "hyperparameters: cannot change"),
        ("searcher: {name: random, max_trials: 2}", InvalidArgument, "searcher.name: must stay 'single'"),
        ("project: other", InvalidArgument, "override_config.project"),
        ("workspace: other", InvalidArgument, "override_config.workspace"),
        ("max_restarts: -1", InvalidArgument, "invalid experiment config: max_restarts"),
        ("reproducibility: {experiment_seed: 7}", InvalidArgument, "reproducibility.experiment_seed"),
        ("checkpoint_storage: {host_path: /elsewhere}", InvalidArgument, "checkpoint_storage: only"),
        ("resources: {resource_pool: nowhere}", InvalidArgument, "resources.resource_pool"),
        ("bind_mounts: [{host_path: rel, container_path: /x}]", InvalidArgument, "bind_mounts[0].host_path"),
        ("searcher: [", InvalidArgument, "override_config: config: not valid YAML"),
        ("- a list", InvalidArgument, "override_config: config: must be a mapping"),
        ("x" * (continuation.MAX_OVERRIDE_CHARS + 1), InvalidArgument, "override_config: at most"),
    ],
)
def test_a_refused_override_names_its_field_and_changes_nothing(
    master: Master, override: str, error: type[Exception], named: str
) -> None:
    master.add_agent("a1")
    experiment_id = master.create(hyperparameters={"lr": 0.1})
    _run_to_end(master, experiment_id)
    before = _snapshot(master, experiment_id)
    with pytest.raises(error, match=named.replace("[", r"\[")):
        continuation.continue_experiment(master.ctx, master.admin, experiment_id, override)
    master.settle()
    assert _snapshot(master, experiment_id) == before


def test_an_override_with_aliases_is_bounded_before_it_expands(master: Master) -> None:
    master.add_agent("a1")
    experiment_id = master.create()
    _run_to_end(master, experiment_id)
    bomb = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(8)
    )
    before = _snapshot(master, experiment_id)
    with pytest.raises(InvalidArgument, match=r"override_config: .*aliases expanded"):
        continuation.continue_experiment(master.ctx, master.admin, experiment_id, bomb)
    assert _snapshot(master, experiment_id) == before


def test_a_running_experiment_is_refused(master: Master) -> None:
    master.add_agent("a1")
    experiment_id = master.create()
    before = _snapshot(master, experiment_id)
    with pytest.raises(FailedPrecondition, match="is ACTIVE: only an experiment that has ended"):
        continuation.continue_experiment(master.ctx, master.admin, experiment_id, LONGER)
    assert _snapshot(master, experiment_id) == before


def test_other_searchers_are_refused(master: Master) -> None:
    master.add_agent("a1", slots=2)
    experiment_id = master.create(**GRID)
    _run_to_end(master, experiment_id)
    assert master.experiment(experiment_id).state == "COMPLETED"
    before = _snapshot(master, experiment_id)
    with pytest.raises(InvalidArgument, match="only a single-searcher experiment takes an override"):
        continuation.continue_experiment(master.ctx, master.admin, experiment_id, LONGER)
    with pytest.raises(FailedPrecondition, match="has been completed, with every trial completed"):
        continuation.continue_experiment(master.ctx, master.admin, experiment_id, "")
    assert _snapshot(master, experiment_id) == before
    asha = {
        "searcher": {
            "name": "adaptive_asha",
            "metric": "loss",
            "max_length": {"batches": 10},
            "max_trials": 1,
        },
    }
    asha_id = master.create(**asha)
    asha_before = _snapshot(master, asha_id)
    with pytest.raises(InvalidArgument, match=r"searcher\.name: only single, grid and random searches"):
        continuation.continue_experiment(master.ctx, master.admin, asha_id, "")
    assert _snapshot(master, asha_id) == asha_before


def _run_one(master: Master, trial_id: int, code: int) -> None:
    for container_id in master.run_containers(master.live(trial_id).id):
        master.exit(container_id, code)


def test_a_random_search_retries_its_failed_trial_and_keeps_the_completed_ones(master: Master) -> None:
    # One trial at a time, as on one slot: the first completes, the second errors (no restarts
    # allowed), the third completes; the search completes with one trial in ERROR.
    master.add_agent("a1")
    experiment_id = master.create(
        searcher={
            "name": "random",
            "metric": "loss",
            "max_length": {"batches": 10},
            "max_trials": 3,
            "max_concurrent_trials": 1,
        },
        hyperparameters={"x": {"type": "double", "minval": 0, "maxval": 1}},
        max_restarts=0,
    )
    for code in (0, 1, 0):
        live = [t for t in master.trials(experiment_id) if t.state == "ACTIVE"]
        assert len(live) == 1
        _run_one(master, live[0].id, code)
    assert master.experiment(experiment_id).state == "COMPLETED"
    first, failed, third = master.trials(experiment_id)
    assert [first.state, failed.state, third.state] == ["COMPLETED", "ERROR", "COMPLETED"]

    continuation.continue_experiment(master.ctx, master.admin, experiment_id, "")
    master.settle()

    assert master.experiment(experiment_id).state == "ACTIVE"
    trials = master.trials(experiment_id)
    assert [t.id for t in trials] == [first.id, failed.id, third.id]  # no new trial
    kept, retried, kept_too = trials
    # The completed trials are kept as they ended; the failed one runs again from its checkpoint.
    assert (kept.state, kept.end_time, kept.run_id) == ("COMPLETED", first.end_time, first.run_id)
    assert (kept_too.state, kept_too.end_time) == ("COMPLETED", third.end_time)
    assert (retried.state, retried.end_time, retried.restarts) == ("ACTIVE", None, 0)
    assert retried.hparams == failed.hparams
    assert master.live(failed.id).run_id == failed.run_id + 1

    _run_one(master, failed.id, 0)
    assert master.experiment(experiment_id).state == "COMPLETED"
    assert [t.state for t in master.trials(experiment_id)] == ["COMPLETED"] * 3
    assert len(master.trials(experiment_id)) == 3
    # Now every trial completed: nothing is left to retry.
    with pytest.raises(FailedPrecondition, match="has been completed"):
        continuation.continue_experiment(master.ctx, master.admin, experiment_id, "")


def test_a_killed_grid_search_retries_every_trial_it_did_not_finish(master: Master) -> None:
    master.add_agent("a1", slots=2)
    experiment_id = master.create(**GRID, max_restarts=2)
    first, second = master.trials(experiment_id)
    _run_one(master, first.id, 0)
    # The second fails once (a restart counted), then the experiment is killed.
    _run_one(master, second.id, 1)
    master.settle()
    assert master.trials(experiment_id)[1].restarts == 1
    with master.ctx.unit_of_work() as w:
        experiments.kill(master.ctx, w, experiments.load(w, experiment_id))
    master.settle()
    for container in master.containers(master.live(second.id).id):
        master.exit(container.id, 137)
    assert master.experiment(experiment_id).state == "CANCELED"
    assert [t.state for t in master.trials(experiment_id)] == ["COMPLETED", "CANCELED"]

    continuation.continue_experiment(master.ctx, master.admin, experiment_id, "")
    master.settle()
    kept, retried = master.trials(experiment_id)
    assert (kept.state, retried.state, retried.restarts) == ("COMPLETED", "ACTIVE", 0)
    assert kept.restarts == 0
    _run_one(master, second.id, 0)
    assert master.experiment(experiment_id).state == "COMPLETED"
    assert [t.state for t in master.trials(experiment_id)] == ["COMPLETED", "COMPLETED"]


def test_who_may_continue_and_what_they_may_change(master: Master) -> None:
    master.add_agent("a1")
    determined = _user(master, "determined")
    request = creation.CreateRequest(
        config_text=config_text(),
        files=[ContextFile(path="train.py", type=ord("0"), content=b"print(1)\n", mtime=0, mode=0o644)],
        activate=True,
        validate_only=False,
    )
    theirs = creation.create(master.ctx, determined, request).experiment_id
    assert theirs is not None
    master.settle()
    _run_to_end(master, theirs)
    mine = master.create()
    _run_to_end(master, mine)
    before = _snapshot(master, mine)

    # Not the owner, not an admin: refused.
    with pytest.raises(PermissionDenied, match="only its owner or an admin"):
        continuation.continue_experiment(master.ctx, determined, mine, LONGER)
    assert _snapshot(master, mine) == before

    # An admin who is not the owner may lengthen the training, not change what it runs.
    theirs_before = _snapshot(master, theirs)
    with pytest.raises(PermissionDenied, match="only they may change entrypoint"):
        continuation.continue_experiment(master.ctx, master.admin, theirs, "entrypoint: python3 other.py")
    assert _snapshot(master, theirs) == theirs_before
    continuation.continue_experiment(master.ctx, master.admin, theirs, LONGER)
    assert master.experiment(theirs).state == "ACTIVE"
    assert master.experiment(theirs).owner_id == determined.user_id


def test_an_archived_experiment_is_refused(master: Master) -> None:
    master.add_agent("a1")
    experiment_id = master.create()
    _run_to_end(master, experiment_id)
    with master.ctx.unit_of_work() as w:
        experiments.set_archived(w, experiments.load(w, experiment_id), True)
    before = _snapshot(master, experiment_id)
    with pytest.raises(FailedPrecondition, match="archived"):
        continuation.continue_experiment(master.ctx, master.admin, experiment_id, LONGER)
    assert _snapshot(master, experiment_id) == before


def test_the_override_merges_as_determined_merges(master: Master) -> None:
    master.add_agent("a1")
    experiment_id = master.create(labels=["a"], environment={"environment_variables": ["A=1"]})
    _run_to_end(master, experiment_id)
    stored = copy.deepcopy(master.experiment(experiment_id).config)
    override = yaml.safe_dump(
        {
            "labels": ["b"],
            "environment": {"environment_variables": ["B=2"]},
            "searcher": {"max_length": {"batches": 30}},
        }
    )
    continuation.continue_experiment(master.ctx, master.admin, experiment_id, override)
    config = master.experiment(experiment_id).config
    assert config["labels"] == ["b", "a"] and master.experiment(experiment_id).labels == ["b", "a"]
    assert config["searcher"]["max_length"] == {"batches": 30}
    assert config["searcher"]["metric"] == stored["searcher"]["metric"]
    env = config["environment"]["environment_variables"]
    flat = env if isinstance(env, list) else env["cpu"]
    assert flat == ["A=1", "B=2"]

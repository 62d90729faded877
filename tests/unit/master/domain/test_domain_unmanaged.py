"""Unmanaged experiments (Determined's Core API v2 run outside the cluster): what the master does with
them, on both databases. Their code sets the states; the master never schedules them, never asks a
searcher about them, resumes them by external id, and marks a trial whose code went silent ERROR."""

from __future__ import annotations

from datetime import timedelta

import pytest
import yaml
from sqlalchemy import func, select

from services.master.domain.checkpoints import checkpoints
from services.master.domain.experiments import experiments as experiment_lifecycle
from services.master.domain.experiments import unmanaged
from services.master.domain.experiments.continuation import continue_experiment
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.errors import FailedPrecondition, InvalidArgument, PermissionDenied
from services.master.domain.kernel.states import InvalidTransition, RunState, TaskState
from services.master.domain.kernel.task_ids import trial_task_id
from services.master.domain.metrics import logs
from services.master.domain.metrics.intake import report
from services.master.domain.metrics.reports import Report
from services.master.domain.trials import trials as trial_lifecycle
from services.master.store import models
from tests.unit.master.domain.harness import Master

# On both databases: the external ids' unique keys and the trials' own transition tables in SQL.
pytestmark = pytest.mark.on_each_database

S = RunState


def core_v2_config(**overrides: object) -> str:
    """The config text the stock client's core_v2 sends (nulls for what the script left open)."""
    config: dict[str, object] = {
        "name": "unmanaged-test",
        "data": None,
        "description": None,
        "labels": None,
        "searcher": {"name": "single", "metric": "unmanaged"},
        "workspace": None,
        "project": None,
        "checkpoint_storage": {"type": "shared_fs", "host_path": "/tmp/unmanaged-checkpoints"},
        **overrides,
    }
    return yaml.safe_dump(config)


def _count(m: Master, model: type) -> int:
    with m.db.read() as s:
        return int(s.scalar(select(func.count()).select_from(model)) or 0)


def _task(m: Master, trial: models.Trial) -> models.Task:
    with m.db.read() as s:
        return s.get_one(models.Task, trial_task_id(trial.experiment_id, trial.request_id))


def _one_trial(m: Master, experiment_id: int) -> models.Trial:
    trials = m.trials(experiment_id)
    assert len(trials) == 1
    return trials[0]


def test_an_unmanaged_run_is_never_scheduled_nor_searched_and_its_code_sets_its_state(master: Master) -> None:
    m = master
    m.add_agent("agent-1", slots=1)
    created = unmanaged.create_experiment(m.ctx, m.admin, core_v2_config())
    exp = m.experiment(created.experiment_id)
    assert exp.unmanaged and exp.state == S.PAUSED and exp.searcher_session_id == ""

    trial_id = unmanaged.create_trial(m.ctx, m.admin, exp.id, {"lr": 0.1})
    trial = _one_trial(m, exp.id)
    assert trial.id == trial_id and trial.state == S.PAUSED and trial.hparams == {"lr": 0.1}
    assert _task(m, trial).state == TaskState.ACTIVE

    run = unmanaged.start_trial(m.ctx, m.admin, trial_id, resume=True)
    assert (run.run_id, run.latest_checkpoint, run.steps_completed) == (1, None, 0)
    unmanaged.patch_trial(m.ctx, m.admin, trial_id, S.ACTIVE)
    m.settle()
    assert m.experiment(exp.id).state == S.ACTIVE
    # Nothing of it is ever placed: no allocation, no command to the agent, no searcher event.
    assert _count(m, models.Allocation) == 0
    assert m.hub.sent == []
    assert _count(m, models.SearcherEvent) == 0

    # Its code reports training and validation metrics under its run; still nothing for a searcher.
    report(m.ctx, m.admin, trial_id, run.run_id, [Report("training", 10, {"loss": 0.5}, seq=1)])
    report(m.ctx, m.admin, trial_id, run.run_id, [Report("validation", 10, {"unmanaged": 0.4}, seq=2)])
    m.settle()
    assert _count(m, models.SearcherEvent) == 0
    assert _count(m, models.Allocation) == 0

    unmanaged.patch_trial(m.ctx, m.admin, trial_id, S.COMPLETED)
    trial = _one_trial(m, exp.id)
    assert trial.state == S.COMPLETED and trial.end_time is not None
    exp = m.experiment(exp.id)
    assert exp.state == S.COMPLETED and exp.end_time is not None
    assert _task(m, trial).state == TaskState.COMPLETED
    # No checkpoint GC is owed: its checkpoints are where its code runs, for a re-run to resume.
    assert _count(m, models.DeferredWork) == 0


def test_a_heartbeat_only_marks_the_trial_alive(master: Master) -> None:
    m = master
    exp_id = unmanaged.create_experiment(m.ctx, m.admin, core_v2_config()).experiment_id
    trial_id = unmanaged.create_trial(m.ctx, m.admin, exp_id, {})
    unmanaged.patch_trial(m.ctx, m.admin, trial_id, None)
    trial = _one_trial(m, exp_id)
    assert trial.state == S.PAUSED and trial.last_activity is not None


def test_an_exception_ends_the_trial_and_experiment_in_error(master: Master) -> None:
    m = master
    exp_id = unmanaged.create_experiment(m.ctx, m.admin, core_v2_config()).experiment_id
    trial_id = unmanaged.create_trial(m.ctx, m.admin, exp_id, {})
    unmanaged.start_trial(m.ctx, m.admin, trial_id, resume=True)
    unmanaged.patch_trial(m.ctx, m.admin, trial_id, S.ACTIVE)
    unmanaged.patch_trial(m.ctx, m.admin, trial_id, S.ERROR)
    assert _one_trial(m, exp_id).state == S.ERROR
    assert m.experiment(exp_id).state == S.ERROR


def test_external_ids_resume_the_same_experiment_and_trial_where_it_left_off(master: Master) -> None:
    m = master
    first = unmanaged.create_experiment(m.ctx, m.admin, core_v2_config(), external_id="exp-A")
    trial_id = unmanaged.create_trial(m.ctx, m.admin, first.experiment_id, {}, external_id="trial-1")
    run = unmanaged.start_trial(m.ctx, m.admin, trial_id, resume=True)
    unmanaged.patch_trial(m.ctx, m.admin, trial_id, S.ACTIVE)
    report(m.ctx, m.admin, trial_id, run.run_id, [Report("training", 5, {"loss": 1.0}, seq=1)])
    task_id = trial_task_id(first.experiment_id, "trial-1")
    checkpoints.report(
        m.ctx,
        m.admin,
        checkpoints.ReportedCheckpoint(
            uuid="ck-1",
            allocation_id="",
            task_id=task_id,
            resources={"a": 3},
            metadata={"steps_completed": 5},
        ),
    )
    unmanaged.patch_trial(m.ctx, m.admin, trial_id, S.COMPLETED)
    assert m.experiment(first.experiment_id).state == S.COMPLETED

    # The same script run again: the same experiment and trial, resumed from its checkpoint.
    again = unmanaged.create_experiment(m.ctx, m.admin, core_v2_config(), external_id="exp-A")
    assert again.experiment_id == first.experiment_id
    assert unmanaged.create_trial(m.ctx, m.admin, again.experiment_id, {}, external_id="trial-1") == trial_id
    resumed = unmanaged.start_trial(m.ctx, m.admin, trial_id, resume=True)
    assert resumed.run_id == 2 and resumed.latest_checkpoint == "ck-1"
    unmanaged.patch_trial(m.ctx, m.admin, trial_id, S.ACTIVE)
    trial = _one_trial(m, first.experiment_id)
    assert trial.state == S.ACTIVE and trial.end_time is None
    assert _task(m, trial).state == TaskState.ACTIVE
    exp = m.experiment(first.experiment_id)
    assert exp.state == S.ACTIVE and exp.end_time is None
    # Reports of the earlier run are refused now.
    with pytest.raises(FailedPrecondition):
        report(m.ctx, m.admin, trial_id, run.run_id, [Report("training", 6, {"loss": 1.0}, seq=2)])
    unmanaged.patch_trial(m.ctx, m.admin, trial_id, S.COMPLETED)
    assert m.experiment(first.experiment_id).state == S.COMPLETED
    assert _count(m, models.Experiment) == 1 and _count(m, models.Trial) == 1


def test_a_second_trial_under_another_external_id_joins_the_experiment(master: Master) -> None:
    m = master
    exp_id = unmanaged.create_experiment(m.ctx, m.admin, core_v2_config(), external_id="hp").experiment_id
    one = unmanaged.create_trial(m.ctx, m.admin, exp_id, {"x": 1}, external_id="t1")
    two = unmanaged.create_trial(m.ctx, m.admin, exp_id, {"x": 2}, external_id="t2")
    assert one != two
    unmanaged.patch_trial(m.ctx, m.admin, one, S.ACTIVE)
    unmanaged.patch_trial(m.ctx, m.admin, two, S.ACTIVE)
    unmanaged.patch_trial(m.ctx, m.admin, one, S.ERROR)
    assert m.experiment(exp_id).state == S.ACTIVE  # the most progressed trial runs
    unmanaged.patch_trial(m.ctx, m.admin, two, S.COMPLETED)
    assert m.experiment(exp_id).state == S.COMPLETED


def test_the_master_refuses_to_drive_an_unmanaged_experiment(master: Master) -> None:
    m = master
    exp_id = unmanaged.create_experiment(m.ctx, m.admin, core_v2_config()).experiment_id
    trial_id = unmanaged.create_trial(m.ctx, m.admin, exp_id, {})
    unmanaged.patch_trial(m.ctx, m.admin, trial_id, S.ACTIVE)
    for move in (experiment_lifecycle.pause, experiment_lifecycle.activate):
        with pytest.raises(FailedPrecondition, match="unmanaged"), m.ctx.unit_of_work() as w:
            move(m.ctx, w, experiment_lifecycle.load(w, exp_id))
    m.settle()
    assert _count(m, models.Allocation) == 0
    # A kill ends it at once: nothing runs on the cluster to be stopped.
    with m.ctx.unit_of_work() as w:
        experiment_lifecycle.kill(m.ctx, w, experiment_lifecycle.load(w, exp_id))
    assert m.experiment(exp_id).state == S.CANCELED
    assert _one_trial(m, exp_id).state == S.CANCELED
    with pytest.raises(FailedPrecondition, match="unmanaged"):
        continue_experiment(m.ctx, m.admin, exp_id, "")


def test_trials_only_on_unmanaged_experiments_and_only_for_their_owner(master: Master) -> None:
    m = master
    managed = m.create()
    with pytest.raises(FailedPrecondition, match="managed by the master"):
        unmanaged.create_trial(m.ctx, m.admin, managed, {})
    managed_trial = m.trials(managed)[0]
    with pytest.raises(FailedPrecondition):
        unmanaged.patch_trial(m.ctx, m.admin, managed_trial.id, S.COMPLETED)
    assert m.trials(managed)[0].state == managed_trial.state

    exp_id = unmanaged.create_experiment(m.ctx, m.admin, core_v2_config(), external_id="admins").experiment_id
    trial_id = unmanaged.create_trial(m.ctx, m.admin, exp_id, {})
    other = m.add_user("mallory")
    with pytest.raises(PermissionDenied):
        unmanaged.patch_trial(m.ctx, other, trial_id, S.ERROR)
    with pytest.raises(PermissionDenied):
        unmanaged.create_experiment(m.ctx, other, core_v2_config(), external_id="admins")
    assert _one_trial(m, exp_id).state == S.PAUSED


def test_bad_input_is_refused_before_anything_is_stored(master: Master) -> None:
    m = master
    with pytest.raises(InvalidArgument, match="external_experiment_id"):
        unmanaged.create_experiment(m.ctx, m.admin, core_v2_config(), external_id="x" * 129)
    with pytest.raises(InvalidArgument, match="external_experiment_id"):
        unmanaged.create_experiment(m.ctx, m.admin, core_v2_config(), external_id="a/b")
    with pytest.raises(InvalidArgument, match="searcher"):
        unmanaged.create_experiment(m.ctx, m.admin, core_v2_config(searcher={"name": "nope"}))
    assert _count(m, models.Experiment) == 0
    exp_id = unmanaged.create_experiment(m.ctx, m.admin, core_v2_config()).experiment_id
    with pytest.raises(InvalidArgument, match="external_trial_id"):
        unmanaged.create_trial(m.ctx, m.admin, exp_id, {}, external_id="t" * 65)
    assert _count(m, models.Trial) == 0
    trial_id = unmanaged.create_trial(m.ctx, m.admin, exp_id, {})
    with pytest.raises(InvalidTransition):
        unmanaged.patch_trial(m.ctx, m.admin, trial_id, S.STOPPING_KILLED)
    assert _one_trial(m, exp_id).state == S.PAUSED


def test_a_trial_whose_code_went_silent_is_marked_error(master: Master) -> None:
    m = master
    exp_id = unmanaged.create_experiment(m.ctx, m.admin, core_v2_config()).experiment_id
    quiet = unmanaged.create_trial(m.ctx, m.admin, exp_id, {}, external_id="quiet")
    alive = unmanaged.create_trial(m.ctx, m.admin, exp_id, {}, external_id="alive")
    for trial_id in (quiet, alive):
        unmanaged.patch_trial(m.ctx, m.admin, trial_id, S.ACTIVE)
    assert unmanaged.mark_lost_trials(m.ctx) == []
    with m.ctx.unit_of_work() as w:
        w.session.get_one(models.Trial, quiet).last_activity = (
            utcnow() - unmanaged.LOST_AFTER - timedelta(seconds=1)
        )
    assert unmanaged.mark_lost_trials(m.ctx) == [quiet]
    states = {t.id: t.state for t in m.trials(exp_id)}
    assert states == {quiet: S.ERROR, alive: S.ACTIVE}
    assert m.experiment(exp_id).state == S.ACTIVE


def test_its_code_ships_its_output_into_the_trials_logs(master: Master) -> None:
    m = master
    exp_id = unmanaged.create_experiment(m.ctx, m.admin, core_v2_config()).experiment_id
    trial_id = unmanaged.create_trial(m.ctx, m.admin, exp_id, {}, external_id="t")
    task_id = trial_task_id(exp_id, "t")
    assert unmanaged.trial_of_task(m.ctx, m.admin, task_id) == trial_id
    lines = [logs.ShippedLine(rank=0, timestamp=utcnow(), message=f"line {i}\n") for i in range(3)]
    logs.store_shipped(m.ctx, task_id, trial_id, lines)
    logs.store_shipped(m.ctx, task_id, trial_id, lines[:1])  # a second batch is stored too
    read = list(
        logs.read_logs(
            m.ctx,
            logs.LogFilter(trial_id=trial_id),
            limit=0,
            descending=False,
            follow=False,
            is_done=lambda: True,
        )
    )
    assert [r.message for r in read] == ["line 0\n", "line 1\n", "line 2\n", "line 0\n"]
    with pytest.raises(InvalidArgument):
        unmanaged.trial_of_task(m.ctx, m.admin, f"{exp_id}.nope")


def test_a_killed_trial_ends_canceled_and_no_managed_path_moves_it(master: Master) -> None:
    m = master
    exp_id = unmanaged.create_experiment(m.ctx, m.admin, core_v2_config()).experiment_id
    trial_id = unmanaged.create_trial(m.ctx, m.admin, exp_id, {})
    unmanaged.patch_trial(m.ctx, m.admin, trial_id, S.ACTIVE)
    with pytest.raises(InvalidTransition), m.ctx.unit_of_work() as w:
        trial = w.session.get_one(models.Trial, trial_id)
        trial_lifecycle.stop(m.ctx, w, trial, w.session.get_one(models.Experiment, exp_id), S.STOPPING_KILLED)
    assert _one_trial(m, exp_id).state == S.ACTIVE
    with m.ctx.unit_of_work() as w:
        trial = w.session.get_one(models.Trial, trial_id)
        unmanaged.kill_trial(m.ctx, w, trial, w.session.get_one(models.Experiment, exp_id))
    assert _one_trial(m, exp_id).state == S.CANCELED
    assert m.experiment(exp_id).state == S.CANCELED


def test_only_its_owner_reports_into_an_unmanaged_trial(master: Master) -> None:
    m = master
    owner = m.add_user("alice")
    other = m.add_user("mallory")
    exp_id = unmanaged.create_experiment(m.ctx, owner, core_v2_config()).experiment_id
    trial_id = unmanaged.create_trial(m.ctx, owner, exp_id, {})
    run = unmanaged.start_trial(m.ctx, owner, trial_id, resume=True)
    report(m.ctx, owner, trial_id, run.run_id, [Report("training", 1, {"loss": 1.0}, seq=1)])
    with pytest.raises(PermissionDenied):
        report(m.ctx, other, trial_id, run.run_id, [Report("training", 2, {"loss": 1.0}, seq=2)])
    with pytest.raises(PermissionDenied):
        unmanaged.start_trial(m.ctx, other, trial_id, resume=True)
    task_id = trial_task_id(exp_id, _one_trial(m, exp_id).request_id)
    with pytest.raises(PermissionDenied):
        checkpoints.report(
            m.ctx,
            other,
            checkpoints.ReportedCheckpoint(
                uuid="ck-x", allocation_id="", task_id=task_id, resources={}, metadata={"steps_completed": 1}
            ),
        )
    assert _one_trial(m, exp_id).run_id == 1
    assert _count(m, models.Metric) == 1 and _count(m, models.Checkpoint) == 0

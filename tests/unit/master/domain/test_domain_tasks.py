"""Tasks that are not trials (commands, generic tasks) go through the same scheduler, agents and
allocation lifecycle as trials: a command is placed, gets its own task environment, records its
exit code, is killed, runs on zero slots without taking one, and survives a master restart; a
generic task pauses and unpauses. Trials get a task row of their own too."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import select

from cairn.agent.v1 import agent_pb2 as apb
from services.common.principal import Principal
from services.master.domain.kernel.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
)
from services.master.domain.kernel.states import TaskKind
from services.master.domain.kernel.task_ids import trial_task_id
from services.master.domain.metrics.logs import LogStore
from services.master.domain.reads import tasks as task_reads
from services.master.domain.task_kinds.model_definition import ContextFile
from services.master.domain.tasks import tasks
from services.master.store import models
from services.master.store.db import MIGRATIONS_DIR, Database
from tests.unit.master.domain.harness import Master


def launch(
    master: Master, config: dict[str, object], kind: TaskKind = TaskKind.COMMAND, **extra: object
) -> str:
    files = [ContextFile(path="prep.py", type=ord("0"), content=b"print('prep')\n", mtime=0, mode=0o644)]
    task_id = tasks.create(
        master.ctx,
        master.admin,
        tasks.TaskRequest(kind=kind, config=config, files=files, **extra),  # type: ignore[arg-type]
    )
    master.settle()
    return task_id


def task_of(master: Master, task_id: str) -> models.Task:
    with master.db.read() as s:
        return s.get_one(models.Task, task_id)


def allocations_of(master: Master, task_id: str) -> list[models.Allocation]:
    with master.db.read() as s:
        return list(
            s.scalars(
                select(models.Allocation)
                .where(models.Allocation.task_id == task_id)
                .order_by(models.Allocation.run_id)
            )
        )


def started(master: Master, allocation_id: str) -> apb.StartContainer:
    (start,) = [c for _, c in master.hub.commands("start") if c.allocation_id == allocation_id]
    return start


def change(master: Master, task_id: str, what: object) -> None:
    with master.ctx.unit_of_work() as w:
        what(master.ctx, w, tasks.load(w, task_id))  # type: ignore[operator]
    master.settle()


def test_a_command_runs_with_its_own_environment_and_records_its_exit_code(master: Master) -> None:
    master.add_agent("a1")
    task_id = launch(
        master,
        {
            "entrypoint": ["echo hi; exit 3"],
            "environment": {"environment_variables": ["GREETING=hello"]},
            "bind_mounts": [{"host_path": "/data", "container_path": "data", "read_only": True}],
        },
    )
    (alloc,) = allocations_of(master, task_id)
    assert alloc.id == f"{task_id}.1" and alloc.trial_id is None and alloc.slots == 1
    spec = started(master, alloc.id).spec
    assert (list(spec.entrypoint), spec.shell, spec.has_context) == (["echo hi; exit 3"], True, True)
    env = spec.environment
    assert (env["DET_TASK_ID"], env["DET_TASK_TYPE"], env["DET_ALLOCATION_ID"]) == (
        task_id,
        "COMMAND",
        alloc.id,
    )
    assert env["GREETING"] == "hello" and env["DET_SESSION_TOKEN"]
    # A command is no trial: none of a trial's variables.
    assert not {"DET_TRIAL_ID", "DET_EXPERIMENT_ID", "DET_HPARAMS", "CAIRN_TRIAL_ID"} & set(env)
    assert [(m.host_path, m.container_path, m.read_only) for m in spec.mounts] == [("/data", "data", True)]
    with master.db.read() as s:
        assert task_reads.task_context_archive(s, alloc.id)  # the context directory, for the agent

    (container,) = master.run_containers(alloc.id)
    master.exit(container, 3)
    task = task_of(master, task_id)
    assert (task.state, task.exit_code, task.end_time is not None) == ("ERROR", 3, True)
    assert [a.state for a in allocations_of(master, task_id)] == ["TERMINATED"]  # a command never reruns


def test_a_command_that_exits_zero_completes(master: Master) -> None:
    master.add_agent("a1")
    task_id = launch(master, {"entrypoint": ["true"]})
    (container,) = master.run_containers(allocations_of(master, task_id)[0].id)
    master.exit(container, 0)
    assert (task_of(master, task_id).state, task_of(master, task_id).exit_code) == ("COMPLETED", 0)


def test_killing_a_running_command_cancels_it(master: Master) -> None:
    master.add_agent("a1")
    task_id = launch(master, {"entrypoint": ["sleep", "1000"]})
    (alloc,) = allocations_of(master, task_id)
    (container,) = master.run_containers(alloc.id)
    change(master, task_id, tasks.kill)
    assert task_of(master, task_id).state == "STOPPING_CANCELED"
    assert [k.container_id for _, k in master.hub.commands("kill")] == [container]
    master.exit(container, 137, apb.FAILURE_TYPE_KILLED)
    task = task_of(master, task_id)
    assert (task.state, task.exit_code) == ("CANCELED", 137)
    change(master, task_id, tasks.kill)  # killing an ended task changes nothing
    assert task_of(master, task_id).state == "CANCELED"


def test_a_zero_slot_command_runs_while_every_slot_is_busy(master: Master) -> None:
    master.add_agent("a1", slots=1)
    experiment_id = master.create()
    (trial,) = master.trials(experiment_id)
    trial_alloc = master.live(trial.id)
    master.run_containers(trial_alloc.id)
    busy = launch(master, {"entrypoint": ["sleep", "1"]})
    assert allocations_of(master, busy)[0].state == "PENDING"  # one slot, and the trial holds it
    zero = launch(master, {"entrypoint": ["echo", "aux"], "resources": {"slots": 0}})
    (alloc,) = allocations_of(master, zero)
    assert (alloc.state, alloc.slots, alloc.placements) == (
        "ASSIGNED",
        0,
        [{"agent_id": "a1", "slot_ids": []}],
    )
    assert list(started(master, alloc.id).slot_ids) == []
    assert master.live(trial.id).id == trial_alloc.id  # the trial keeps its slot


def test_bad_command_configs_are_refused_naming_the_field(master: Master) -> None:
    with pytest.raises(InvalidArgument, match=r"config\.entrypoint"):
        launch(master, {"resources": {"slots": 0}})
    with pytest.raises(InvalidArgument, match=r"config\.resources\.slots"):
        launch(master, {"entrypoint": "x", "resources": {"slots": -1}})
    with pytest.raises(InvalidArgument, match="resource_pool"):
        launch(master, {"entrypoint": "x", "resources": {"resource_pool": "nowhere"}})
    # A section of the wrong shape is named, not read into (it was an AttributeError, a 500).
    for key, value in (("resources", "bad"), ("environment", ["x"]), ("bind_mounts", {"a": 1})):
        with pytest.raises(InvalidArgument, match=rf"config\.{key}: must be a"):
            launch(master, {"entrypoint": "x", key: value})
    for kind in (TaskKind.NOTEBOOK, TaskKind.SHELL):
        with pytest.raises(InvalidArgument, match=r"config\.resources: must be a mapping"):
            tasks.create(master.ctx, master.admin, tasks.TaskRequest(kind=kind, config={"resources": "bad"}))
    # The bounds and host-reach policy of experiment configs hold for tasks: a user (not an admin)
    # mounts nothing outside the allowed paths, and deep config is refused naming where.
    with master.db.read() as s:
        found = s.scalar(select(models.User).where(models.User.username == "determined"))
        assert found is not None
        user = Principal(user_id=found.id, username=found.username)
    mount = {"host_path": "/etc", "container_path": "/host-etc"}
    with pytest.raises(InvalidArgument, match=r"bind_mounts\[0\]\.host_path"):
        tasks.create(
            master.ctx,
            user,
            tasks.TaskRequest(kind=TaskKind.COMMAND, config={"entrypoint": "x", "bind_mounts": [mount]}),
        )
    deep: dict[str, object] = {"entrypoint": "x"}
    inner = deep
    for _ in range(40):
        inner["d"] = {}
        inner = inner["d"]  # type: ignore[assignment]
    with pytest.raises(InvalidArgument, match="nested deeper than"):
        launch(master, deep)
    with master.db.read() as s:
        assert list(s.scalars(select(models.Task.id).where(models.Task.kind == "COMMAND"))) == []


def test_a_generic_task_pauses_and_unpauses(master: Master) -> None:
    master.add_agent("a1")
    task_id = launch(master, {"entrypoint": "python3 work.py"}, kind=TaskKind.GENERIC)
    (first,) = allocations_of(master, task_id)
    (container,) = master.run_containers(first.id)
    change(master, task_id, tasks.pause)
    assert task_of(master, task_id).state == "STOPPING_PAUSED"
    assert allocations_of(master, task_id)[0].preempt_requested  # graceful: the code may checkpoint
    master.exit(container, 0)
    assert task_of(master, task_id).state == "PAUSED"
    change(master, task_id, tasks.unpause)
    second = allocations_of(master, task_id)[1]
    assert (task_of(master, task_id).state, second.id, second.state) == ("ACTIVE", f"{task_id}.2", "ASSIGNED")
    (container,) = master.run_containers(second.id)
    master.exit(container, 0)
    assert task_of(master, task_id).state == "COMPLETED"


def test_a_no_pause_generic_task_refuses_to_pause(master: Master) -> None:
    master.add_agent("a1")
    task_id = launch(master, {"entrypoint": "true"}, kind=TaskKind.GENERIC, no_pause=True)
    with pytest.raises(FailedPrecondition, match="no_pause"):
        change(master, task_id, tasks.pause)


def test_a_fork_takes_its_source_config_and_context(master: Master) -> None:
    master.add_agent("a1", slots=2)
    source = launch(
        master, {"entrypoint": "python3 work.py", "resources": {"slots": 0}}, kind=TaskKind.GENERIC
    )
    fork = tasks.create(
        master.ctx, master.admin, tasks.TaskRequest(kind=TaskKind.GENERIC, config={}, forked_from=source)
    )
    task = task_of(master, fork)
    assert (task.config, task.forked_from, task.slots) == (
        {"entrypoint": "python3 work.py", "resources": {"slots": 0}},
        source,
        0,
    )
    with master.db.read() as s:
        assert s.get_one(models.TaskContext, fork).archive == s.get_one(models.TaskContext, source).archive


def test_trials_are_tasks_too(master: Master) -> None:
    master.add_agent("a1")
    experiment_id = master.create()
    (trial,) = master.trials(experiment_id)
    alloc = master.live(trial.id)
    task = task_of(master, trial_task_id(experiment_id, trial.request_id))
    assert (task.kind, task.state, task.experiment_id, alloc.task_id) == (
        "TRIAL",
        "ACTIVE",
        experiment_id,
        task.id,
    )
    (container,) = master.run_containers(alloc.id)
    master.report(trial.id, 1, "validation", 10, 1, loss=0.5)
    master.exit(container, 0)
    assert master.trials(experiment_id)[0].state == "COMPLETED"
    assert task_of(master, task.id).state == "COMPLETED" and task_of(master, task.id).end_time is not None


def test_a_running_command_survives_a_master_restart(master: Master, tmp_path: Path) -> None:
    master.add_agent("a1")
    task_id = launch(master, {"entrypoint": ["sleep", "5"]})
    (alloc,) = allocations_of(master, task_id)
    (container,) = master.run_containers(alloc.id)
    master.close()

    restarted = master.restarted()
    try:
        restarted.add_agent(
            "a1",
            containers=[
                apb.RunningContainer(
                    container_id=container,
                    allocation_id=alloc.id,
                    state=apb.CONTAINER_STATE_RUNNING,
                    slot_ids=["0"],
                )
            ],
        )
        restarted.settle()
        assert [a.state for a in allocations_of(restarted, task_id)] == ["RUNNING"]  # reattached, not rerun
        assert restarted.hub.commands("start") == []
        restarted.exit(container, 0)
        assert task_of(restarted, task_id).state == "COMPLETED"
    finally:
        restarted.close()


def test_upgrading_gives_existing_trials_their_tasks(tmp_path: Path) -> None:
    """A database from before 0008 (made here by downgrading one) gets a task for every trial, its
    allocations and log lines pointing at it; a command's rows cannot go back and are dropped."""
    master = Master(tmp_path / "master")
    master.add_agent("a1")
    experiment_id = master.create()
    (trial,) = master.trials(experiment_id)
    alloc = master.live(trial.id)
    (container,) = master.run_containers(alloc.id)
    LogStore(master.ctx).store(
        "a1", apb.LogBatch(entries=[apb.LogEntry(container_id=container, seq=1, message="hi")])
    )
    launch(master, {"entrypoint": "true", "resources": {"slots": 0}})
    url = master.ctx.settings.database_url
    master.close()

    db = Database(url)
    with db.engine.connect() as connection:
        connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
        connection.commit()
        with connection.begin():
            cfg = Config()
            cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
            cfg.attributes["connection"] = connection
            command.downgrade(cfg, "0007")
    db.dispose()
    db = Database(url)
    try:
        db.migrate()
        task_id = trial_task_id(experiment_id, trial.request_id)
        with db.read() as s:
            (task,) = s.scalars(select(models.Task))
            assert (task.id, task.kind, task.state, task.experiment_id) == (
                task_id,
                "TRIAL",
                "ACTIVE",
                experiment_id,
            )
            assert task.description == f"Trial {trial.id} (Experiment {experiment_id})"
            assert [a.task_id for a in s.scalars(select(models.Allocation))] == [task_id]
            assert [(line.task_id, line.message) for line in s.scalars(select(models.TaskLog))] == [
                (task_id, "hi")
            ]
    finally:
        db.dispose()


def test_set_priority_moves_a_task_and_its_allocation_within_bounds(master: Master) -> None:
    task_id = launch(master, {"entrypoint": ["sleep", "1000"], "resources": {"priority": 50}})
    (alloc,) = allocations_of(master, task_id)
    assert (task_of(master, task_id).priority, alloc.priority) == (50, 50)

    tasks.set_priority(master.ctx, master.admin, task_id, TaskKind.COMMAND, 10)
    task = task_of(master, task_id)
    assert (task.priority, task.config["resources"]["priority"]) == (10, 10)
    assert allocations_of(master, task_id)[0].priority == 10  # the pending allocation takes it

    for bad in (0, 100, -5):
        with pytest.raises(InvalidArgument, match=r"^priority: "):
            tasks.set_priority(master.ctx, master.admin, task_id, TaskKind.COMMAND, bad)
    stranger = master.add_user("stranger")
    with pytest.raises(PermissionDenied):
        tasks.set_priority(master.ctx, stranger, task_id, TaskKind.COMMAND, 20)
    with pytest.raises(NotFound):  # a command is not a notebook
        tasks.set_priority(master.ctx, master.admin, task_id, TaskKind.NOTEBOOK, 20)
    assert task_of(master, task_id).priority == 10  # refusals changed nothing

    change(master, task_id, tasks.kill)
    with pytest.raises(FailedPrecondition, match="has ended"):
        tasks.set_priority(master.ctx, master.admin, task_id, TaskKind.COMMAND, 20)


@pytest.mark.on_each_database  # paging (offset, limit, order) is SQL each database answers
def test_task_lists_page_by_determined_rules(master: Master) -> None:
    ids = [launch(master, {"entrypoint": ["true"], "resources": {"slots": 0}}) for _ in range(3)]
    with master.db.read() as s:

        def page(offset: int, limit: int, newest_first: bool = False) -> tuple[list[str], int]:
            rows, where = task_reads.task_page(
                s, TaskKind.COMMAND, offset=offset, limit=limit, newest_first=newest_first
            )
            return [r.task.id for r in rows], where.total

        assert page(0, 0) == (ids, 3)  # limit 0: all of them, as `det cmd list` expects
        assert page(1, 1) == (ids[1:2], 3)
        assert page(-1, 0) == (ids[2:], 3)  # an offset below 0 counts from the end
        assert page(0, 2, newest_first=True) == (ids[::-1][:2], 3)
        assert page(5, 2) == ([], 3)
        assert task_reads.task_page(s, TaskKind.NOTEBOOK)[0] == []

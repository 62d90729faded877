"""The master's domain in one process: a real MasterContext on SQLite, wired as the master wires it,
with the scheduler's and searcher's own domain code behind the domain's ports, and a hub that
records what would go to agents instead of sending it, and the checkpoint service's own servicer
(GC policy, deletion, real storage) behind its port. Tests drive it step by step: a scheduling
pass, the searcher pump, an agent's report, a pass of the deferred-work loop, with nothing running
in the background."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import select

from cairn.agent.v1 import agent_pb2 as apb
from cairn.checkpoint.v1 import checkpoint_pb2 as cpb
from cairn.scheduler.v1 import scheduler_pb2 as schpb
from cairn.searcher.v1 import searcher_pb2 as spb
from cairn.searcher_plugin import convert as searcher_convert
from cairn.searcher_plugin.errors import SearcherError
from services.checkpoint.servicer import CheckpointServicer
from services.common.principal import Principal
from services.master.configuration.settings import Settings
from services.master.domain import wiring
from services.master.domain.allocations import containers
from services.master.domain.checkpoints.checkpoints import CheckpointGc
from services.master.domain.deletion.deferred_loop import DeferredWorkRunner, master_handlers
from services.master.domain.experiments import creation
from services.master.domain.experiments.searcher_pump import SearcherPump
from services.master.domain.identity import default_groups
from services.master.domain.identity.auth import AuthService
from services.master.domain.identity.grants import GrantCache
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.deferred_work import Backoff
from services.master.domain.kernel.errors import FailedPrecondition, InvalidArgument, NotFound, Unavailable
from services.master.domain.kernel.ports import storage_struct
from services.master.domain.kernel.states import TaskKind
from services.master.domain.metrics import intake
from services.master.domain.metrics.reports import Report
from services.master.domain.scheduling import agents
from services.master.domain.scheduling.agent_hub import AgentHub
from services.master.domain.scheduling.scheduling import SchedulingLoop
from services.master.domain.task_kinds.model_definition import ContextFile
from services.master.domain.tasks import tasks
from services.master.domain.workspaces import workspaces
from services.master.store import models
from services.master.store.db import Database
from services.scheduler.convert import (
    decision_to_proto,
    state_from_proto,
)
from services.scheduler.domain.errors import InvalidScheduleInput
from services.scheduler.domain.schedule import schedule
from services.scheduler.forecaster import forecast
from services.scheduler.session_table import SessionTable
from services.searcher.domain.preview import preview
from services.searcher.domain.registry import builtin_registry
from services.searcher.domain.sessions import SessionManager
from tests.support.databases import migrated_sqlite


class RecordingHub(AgentHub):
    """Agents that are "connected" by the test, and every command the master sends them."""

    def __init__(self) -> None:
        super().__init__()
        self.connected: set[str] = set()
        self.sent: list[tuple[str, apb.MasterMessage]] = []

    def send(self, agent_id: str, message: apb.MasterMessage) -> None:
        self.sent.append((agent_id, message))
        super().send(agent_id, message)  # tracks start commands until acknowledged

    def connected_ids(self) -> frozenset[str]:
        return frozenset(self.connected)

    def placeable_ids(self) -> frozenset[str]:
        # Tests change `connected` directly, which the hub's kept answer does not follow.
        return self.connected_ids() - self._stopping

    def commands(self, kind: str) -> list[tuple[str, Any]]:
        """(agent, command) for every command of `kind` ("start", "kill") sent so far."""
        return [(agent, getattr(m, kind)) for agent, m in self.sent if m.WhichOneof("msg") == kind]


class InProcessScheduler:
    """The scheduler service's decision function, behind the domain's Scheduler port."""

    def __init__(self) -> None:
        self.sessions = SessionTable()

    def schedule(self, request: schpb.ScheduleRequest) -> schpb.ScheduleResponse:
        return decision_to_proto(schedule(state_from_proto(request)))

    def schedule_changes(self, request: schpb.ScheduleChangesRequest) -> schpb.ScheduleChangesResponse:
        try:
            return self.sessions.handle(request)
        except InvalidScheduleInput as exc:
            raise InvalidArgument(str(exc)) from None

    def predict_starts(self, request: schpb.PredictStartsRequest) -> schpb.PredictStartsResponse:
        return forecast(request)  # the scheduler's own, here in this process

    def restart(self) -> None:
        """Forget every session, as a restarted scheduler process would."""
        self.sessions = SessionTable()


_SEARCHER_ERRORS = {"NOT_FOUND": NotFound, "FAILED_PRECONDITION": FailedPrecondition}


class InProcessSearcher:
    """The searcher service's session table, behind the domain's Searcher port. `restart()` forgets
    every session, as a restarted searcher process would."""

    def __init__(self) -> None:
        self.registry = builtin_registry()
        self.sessions = SessionManager(self.registry)
        # False: answer HandleEvents as a searcher without it is answered (the first event only),
        # as the remote client falls back.
        self.batches = True
        self.calls: list[int] = []  # events per call, as the pump sent them
        # Cairn's own searcher, in process: its sessions replay exactly (a test may say otherwise).
        self.replays_exactly = True

    def restart(self) -> None:
        self.sessions = SessionManager(self.registry)

    def _call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except SearcherError as exc:
            raise _SEARCHER_ERRORS.get(exc.kind, InvalidArgument)(str(exc)) from None

    def start(self, session_id: str, spec: spb.SearchSpec) -> spb.SearcherResponse:
        answer = self._call(self.sessions.start, session_id, searcher_convert.spec_from_proto(spec))
        return searcher_convert.answer_to_proto(answer)

    def handle(
        self, session_id: str, after_seq: int, event: spb.SearcherEvent, state_needed: bool = True
    ) -> spb.SearcherResponse:
        converted = searcher_convert.event_from_proto(event)
        return searcher_convert.answer_to_proto(
            self._call(self.sessions.handle, session_id, after_seq, converted, state_needed)
        )

    def handle_many(
        self, session_id: str, after_seq: int, events: Sequence[spb.SearcherEvent], state_needed: bool = True
    ) -> spb.SearcherResponse:
        converted = [searcher_convert.event_from_proto(e) for e in events]
        if not self.batches:
            converted = converted[:1]
        self.calls.append(len(converted))
        return searcher_convert.answer_to_proto(
            self._call(self.sessions.handle_many, session_id, after_seq, converted, state_needed)
        )

    def restore(self, session_id: str, spec: spb.SearchSpec, snapshot: spb.Snapshot) -> None:
        self._call(
            self.sessions.restore,
            session_id,
            searcher_convert.spec_from_proto(spec),
            searcher_convert.snapshot_from_proto(snapshot),
        )

    def close(self, session_id: str) -> None:
        self._call(self.sessions.close, session_id)

    def preview(self, spec: spb.SearchSpec) -> spb.PreviewSearchResponse:
        return searcher_convert.preview_to_proto(
            preview(searcher_convert.spec_from_proto(spec), self.registry)
        )


class _Aborted(Exception):
    pass


class _Context:
    """What the checkpoint servicer needs of a gRPC context: abort."""

    def abort(self, code: Any, details: str) -> None:
        raise _Aborted(f"{code}: {details}")


class InProcessCheckpoints:
    """The checkpoint service's servicer (GC policy, deletion, real storage) behind the domain's
    port. While `down`, every call fails as a stopped service's would (Unavailable); `answered`
    counts the calls it answered, by name."""

    def __init__(self) -> None:
        self.servicer = CheckpointServicer()
        self.down = False
        self.answered: dict[str, int] = {}

    def _answering(self, name: str) -> None:
        if self.down:
            raise Unavailable("checkpoint service at 127.0.0.1:0 is unavailable: connection refused")
        self.answered[name] = self.answered.get(name, 0) + 1

    def collect_garbage(self, request: cpb.CollectGarbageRequest) -> cpb.CollectGarbageResponse:
        self._answering("collect_garbage")
        return self.servicer.CollectGarbage(request, _Context())  # type: ignore[arg-type]

    def delete(
        self, storage: dict[str, Any], uuids: list[str], globs: list[str] | None = None
    ) -> cpb.DeleteResponse:
        self._answering("delete")
        request = cpb.DeleteRequest(
            storage=storage_struct(storage), checkpoint_uuids=uuids, globs=globs or []
        )
        return self.servicer.Delete(request, _Context())  # type: ignore[arg-type]

    def list_files(self, storage: dict[str, Any], uuid: str) -> cpb.ListFilesResponse:
        self._answering("list_files")
        request = cpb.ListFilesRequest(storage=storage_struct(storage), checkpoint_uuid=uuid)
        return self.servicer.ListFiles(request, _Context())  # type: ignore[arg-type]


@dataclass
class InProcessSearchers:
    searcher: InProcessSearcher = field(default_factory=InProcessSearcher)

    def for_config(self, config: Mapping[str, Any]) -> InProcessSearcher:
        return self.searcher


BASE_CONFIG: dict[str, Any] = {
    "name": "domain",
    "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
    "max_restarts": 1,
}


def config_text(**overrides: Any) -> str:
    config = {**BASE_CONFIG, **overrides}
    return yaml.safe_dump(config)


class Master:
    """The domain with its loops driven by hand."""

    def __init__(
        self,
        state_dir: Path,
        *,
        pools: Iterable[Any] = (),
        db_url: str | None = None,
        migrated: bool = False,
        db: Database | None = None,
    ) -> None:
        """`migrated`: the database is at the latest migration already (a copy of the test process's
        template, tests/support/databases.py), so alembic's check of it is skipped (it compiles every
        migration script again: 12 ms a test). `db`: the Database of `db_url` to use rather than a
        new one (the domain fixture keeps one per database for its test process: its engines keep
        the statements SQLAlchemy compiled); this master's close() leaves it as it found it."""
        if db_url is None and db is None and not (state_dir / "master.db").exists():
            # A new master's own SQLite database: a copy of the migrated template, as new.
            db_url, migrated = migrated_sqlite(state_dir / "master.db"), True
        settings = Settings(state_dir=state_dir, db_url=db_url or f"sqlite:///{state_dir / 'master.db'}")
        if pools:
            settings = Settings(state_dir=state_dir, db_url=settings.db_url, pools=tuple(pools))
        state_dir.mkdir(parents=True, exist_ok=True)
        self._state_dir, self._db_url, self._pools = state_dir, settings.db_url, tuple(pools)
        self._given_db = db
        self.db = db if db is not None else Database(settings.database_url)
        if not migrated:
            self.db.migrate()
        self.hub = RecordingHub()
        self.searchers = InProcessSearchers()
        self.ctx = MasterContext(
            settings=settings,
            db=self.db,
            searchers=self.searchers,
            scheduler=InProcessScheduler(),
            hub=self.hub,
            master_id=uuid.uuid4().hex,
            cluster_id="test-cluster",
        )
        wiring.connect(self.ctx)
        if not migrated:  # a migrated copy has the built-in accounts already (tests/support)
            AuthService(self.db, 3600).ensure_builtin_users()
        with self.db.read() as s:
            admin = s.scalar(select(models.User).where(models.User.username == "admin"))
            assert admin is not None
            self.admin = Principal(user_id=admin.id, username=admin.username, admin=True)
        self.scheduling = SchedulingLoop(self.ctx)
        # The view is compared with a whole read once `settle` has settled, not after every pass
        # (CAIRN_CHECK_SCHEDULING_VIEW, as other tests' masters do): a change the tracker missed
        # stays missed until the next snapshot, so the comparison still sees it, for a whole
        # read per settle instead of one per pass.
        if self.scheduling.view is not None:
            self.scheduling.view.check = False
        self.pump = SearcherPump(self.ctx)
        # Work the master owes (GC, deletions), wired as app.py wires it; run by `run_deferred`.
        self.checkpoints = InProcessCheckpoints()
        self.gc = CheckpointGc(self.ctx, self.checkpoints)
        self.ctx.experiment_delete_hooks.append(self.gc.delete_experiment_files)
        self.deferred = DeferredWorkRunner(self.ctx, master_handlers(self.ctx, self.gc), Backoff())

    def grant_cache(self) -> GrantCache:
        """Users' grants kept between calls as the master keeps them (app.py), for its edges."""
        return GrantCache(self.db, lambda: self.ctx.access_version)

    def run_deferred(self) -> int:
        """One step of the deferred-work loop: runs what is due; how many items ran."""
        return self.deferred.run_due()

    def close(self, *, keep_connections: bool = False) -> None:
        """As the master stops: its scheduling view stops listening to the database's sessions, and
        the database's connections are closed (its engines stay usable). `keep_connections`: the
        pools' idle connections stay open for the next master on this Database (a test process's
        own, between tests); any still checked out means a thread outlived the master: all go."""
        self.scheduling.close()
        if not keep_connections or self.db.connections_in_use():
            self.db.dispose()

    def restarted(self, pools: Iterable[Any] | None = None) -> Master:
        """A new master on this one's state and database, as after a restart (close this one first);
        with `pools`, its config has those pools."""
        return Master(
            self._state_dir,
            pools=self._pools if pools is None else tuple(pools),
            db_url=self._db_url,
            migrated=True,
            db=self._given_db,
        )

    # -- the cluster ------------------------------------------------------------------------------
    def add_agent(
        self,
        agent_id: str,
        slots: int = 1,
        address: str = "",
        *,
        containers: Iterable[apb.RunningContainer] = (),
        reconnect: bool = False,
    ) -> agents.Registration:
        """Register the agent (again, with the `containers` it still runs) and count it connected."""
        hello = apb.Hello(
            agent_id=agent_id,
            resource_pool="default",
            hostname=agent_id,
            addresses=[address] if address else [],
            slots=[
                apb.Slot(id=str(i), type=apb.DEVICE_TYPE_CPU, uuid=f"{agent_id}-{i}") for i in range(slots)
            ],
            runtime="process",
            reconnect=reconnect,
            containers=list(containers),
        )
        registration = agents.register(self.ctx, hello)
        self.hub.connected.add(agent_id)
        return registration

    def create(self, text: str | None = None, *, project_id: int | None = None, **overrides: Any) -> int:
        """An active experiment of `text` (else the base config with `overrides`), in `project_id`
        (else where its config says); its first pass settled."""
        request = creation.CreateRequest(
            config_text=text or config_text(**overrides),
            files=[
                ContextFile(path="train.py", type=ord("0"), content=b"print('hi')\n", mtime=0, mode=0o644)
            ],
            activate=True,
            validate_only=False,
            project_id=project_id,
        )
        created = creation.create(self.ctx, self.admin, request)
        assert created.experiment_id is not None
        self.settle()
        return created.experiment_id

    def add_workspace(self, name: str) -> tuple[int, int]:
        """A new workspace of the admin's and a project "p" in it: (workspace id, project id)."""
        with self.ctx.unit_of_work() as w:
            workspace = workspaces.create_workspace(
                self.ctx, w, self.admin, name, workspaces.WorkspaceSettings()
            )
        with self.ctx.unit_of_work() as w:
            project = int(workspaces.create_project(w, self.admin, workspace, "p", None, None))
        return workspace, project

    def add_user(self, name: str) -> Principal:
        """A new active user (not an admin), as the principal of its calls."""
        with self.ctx.unit_of_work() as w:
            now = utcnow()
            row = models.User(
                username=name, password_hash="", admin=False, active=True, created_at=now, modified_at=now
            )
            w.session.add(row)
            w.session.flush()
            # As every new user: a member of the groups new users join (the default roles).
            default_groups.join(w.session, row.id)
            return Principal(user_id=row.id, username=row.username)

    def launch(
        self,
        kind: TaskKind,
        config: Mapping[str, Any] | None = None,
        principal: Principal | None = None,
        **arguments: Any,
    ) -> str:
        """A task of `kind` launched (as the admin unless `principal`), with what the launch names
        beside its config (a TensorBoard's experiment_ids, trial_ids); its id, once placed."""
        request = tasks.TaskRequest(kind=kind, config=dict(config or {}), arguments=arguments)
        task_id = tasks.create(self.ctx, principal or self.admin, request)
        self.settle()
        return task_id

    def settle(self, passes: int = 10) -> None:
        """Deliver searcher events and run scheduling passes until nothing moves (bounded), then
        compare the scheduling view with the database."""
        for _ in range(passes):
            sent = len(self.hub.sent)
            served = self.pump.deliver_all()
            quiet = self.scheduling.run_pass()
            if not served and quiet and len(self.hub.sent) == sent:
                break
        if self.scheduling.view is not None and self.scheduling.view.verify():
            self._check_scheduler_session()

    def _check_scheduler_session(self) -> None:
        """The scheduler's session holds the requests the view says it does: what the view sent,
        and the assignments both sides kept (keep_assignments)."""
        scheduler = self.ctx.scheduler
        while not isinstance(scheduler, InProcessScheduler) and hasattr(scheduler, "inner"):
            scheduler = scheduler.inner
        view = self.scheduling.view
        if not isinstance(scheduler, InProcessScheduler) or view is None:
            return
        session_id, version = view.session
        held = scheduler.sessions.held(session_id)
        if held is None or held[0] != version:
            return  # the next pass sends a snapshot
        with view.lock:
            said = schpb.ScheduleRequest(requests=list(view.pending_requests().values()))
        expected = {r.allocation_id: r for r in state_from_proto(said).requests}
        assert dict(held[1].requests) == expected, "the scheduler's session and the view disagree"

    # -- what agents would report ----------------------------------------------------------------
    def container_state(
        self,
        container_id: str,
        state: int,
        *,
        exit_code: int | None = None,
        failure: int = apb.FAILURE_TYPE_UNSPECIFIED,
        message: str = "",
    ) -> None:
        change = apb.ContainerStateChanged(
            container_id=container_id, state=state, failure_type=failure, message=message
        )
        if exit_code is not None:
            change.exit_code = exit_code
        with self.ctx.unit_of_work() as w:
            containers.on_container_state(self.ctx, w, change)
        self.settle()

    def run_containers(self, allocation_id: str) -> list[str]:
        """Every container of the allocation reports RUNNING; returns their ids by rank."""
        ids = [c.id for c in self.containers(allocation_id)]
        for container_id in ids:
            self.container_state(container_id, apb.CONTAINER_STATE_RUNNING)
        return ids

    def exit(self, container_id: str, code: int, failure: int = apb.FAILURE_TYPE_CONTAINER_FAILED) -> None:
        if code == 0 and failure == apb.FAILURE_TYPE_CONTAINER_FAILED:
            failure = apb.FAILURE_TYPE_UNSPECIFIED
        self.container_state(container_id, apb.CONTAINER_STATE_TERMINATED, exit_code=code, failure=failure)

    def lose(self, container_id: str) -> None:
        """The container's agent went away for good."""
        with self.ctx.unit_of_work() as w:
            container = w.session.get_one(models.Container, container_id)
            containers.fail_container_lost(self.ctx, w, container, "agent lost")
        self.settle()

    def report(
        self, trial_id: int, run_id: int, group: str, steps: int, seq: int | None, **values: float
    ) -> int:
        result = intake.report(
            self.ctx, self.admin, trial_id, run_id, [Report(group, steps, dict(values), seq=seq)]
        )
        self.settle()
        return result.stored

    # -- reading back ------------------------------------------------------------------------------
    def experiment(self, experiment_id: int) -> models.Experiment:
        with self.db.read() as s:
            return s.get_one(models.Experiment, experiment_id)

    def trials(self, experiment_id: int) -> list[models.Trial]:
        with self.db.read() as s:
            return list(
                s.scalars(
                    select(models.Trial)
                    .where(models.Trial.experiment_id == experiment_id)
                    .order_by(models.Trial.id)
                )
            )

    def placed(self, experiment_id: int) -> list[models.Allocation]:
        """The experiment's trials' latest allocations that hold slots (placed, not yet ended)."""
        placed = []
        for trial in self.trials(experiment_id):
            allocations = self.allocations(trial.id)
            if allocations and allocations[-1].state in ("ASSIGNED", "PULLING", "STARTING", "RUNNING"):
                placed.append(allocations[-1])
        return placed

    def allocations(self, trial_id: int) -> list[models.Allocation]:
        with self.db.read() as s:
            return list(
                s.scalars(
                    select(models.Allocation)
                    .where(models.Allocation.trial_id == trial_id)
                    .order_by(models.Allocation.run_id)
                )
            )

    def live(self, trial_id: int) -> models.Allocation:
        found = [a for a in self.allocations(trial_id) if a.state != "TERMINATED"]
        assert len(found) == 1, [(a.id, a.state) for a in self.allocations(trial_id)]
        return found[0]

    def containers(self, allocation_id: str) -> list[models.Container]:
        with self.db.read() as s:
            return list(
                s.scalars(
                    select(models.Container)
                    .where(models.Container.allocation_id == allocation_id)
                    .order_by(models.Container.rank)
                )
            )

    def stored_steps(self, trial_id: int, group: str = "training", archived: bool = False) -> list[int]:
        with self.db.read() as s:
            return sorted(
                s.scalars(
                    select(models.Metric.steps_completed).where(
                        models.Metric.trial_id == trial_id,
                        models.Metric.group_name == group,
                        models.Metric.archived.is_(archived),
                    )
                )
            )

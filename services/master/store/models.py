"""SQLAlchemy models of everything the master keeps.

The schema is owned by the Alembic migrations in store/migrations; these models mirror it (a test
checks that the two agree on both SQLite and PostgreSQL).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class UtcDateTime(TypeDecorator[datetime]):
    """Timestamps are UTC and timezone-aware in Python on every backend (SQLite drops the zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime stored; use datetime.now(UTC)")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON, datetime: UtcDateTime()}


class ClusterInfo(Base):
    """One row: the cluster's identity, fixed at first boot."""

    __tablename__ = "cluster_info"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    cluster_id: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime]


# Tables whose ids users and agents see: on SQLite, AUTOINCREMENT so a deleted row's id is never
# handed out again (PostgreSQL's sequences never do).
NEVER_REUSED = {"sqlite_autoincrement": True}

# Determined's built-ins, created by migration 0006: the "Uncategorized" workspace and its project,
# where experiments go that name no project.
UNCATEGORIZED_WORKSPACE_ID = 1
UNCATEGORIZED_PROJECT_ID = 1


class ClusterMessage(Base):
    """A cluster-wide message (`det master cluster-message set`); the newest row is the message,
    shown from start_time until end_time (none: until cleared or replaced)."""

    __tablename__ = "cluster_messages"
    __table_args__ = (NEVER_REUSED,)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    # The admin who set it (no foreign key: the message outlives what happens to the account).
    created_by: Mapped[int] = mapped_column(Integer)
    message: Mapped[str] = mapped_column(Text)
    start_time: Mapped[datetime]
    end_time: Mapped[datetime | None]
    created_time: Mapped[datetime]


class User(Base):
    __tablename__ = "users"
    __table_args__ = NEVER_REUSED
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    username: Mapped[str] = mapped_column(String(255), unique=True)
    # PBKDF2 of the client-side salted hash; never the password itself.
    password_hash: Mapped[str] = mapped_column(String(255))
    admin: Mapped[bool] = mapped_column(Boolean, default=False)
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    display_name: Mapped[str] = mapped_column(String(255), default="")
    created_at: Mapped[datetime]
    modified_at: Mapped[datetime]
    last_auth_at: Mapped[datetime | None]
    # Signs in through single sign-on only (domain/identity/sso_users.py): no password.
    remote: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # The Linux account the user's tasks run as (Determined's agent_user_group): all four set or all
    # NULL (NULL: the cluster's task user). domain/identity/agent_users.py checks and resolves them.
    agent_uid: Mapped[int | None] = mapped_column(Integer)
    agent_gid: Mapped[int | None] = mapped_column(Integer)
    agent_user: Mapped[str | None] = mapped_column(String(32))
    agent_group: Mapped[str | None] = mapped_column(String(32))


class UserGroup(Base):
    """A group of users (Determined's user group): roles assigned to it hold for every member. The
    group new users join (`joins_new_users`, the built-in "everyone" of migration 0025) is how a
    default cluster keeps its open rule for users created later (domain/identity/groups.py)."""

    __tablename__ = "user_groups"
    __table_args__ = NEVER_REUSED
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    joins_new_users: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    created_at: Mapped[datetime]


class UserGroupMember(Base):
    __tablename__ = "user_group_members"
    group_id: Mapped[int] = mapped_column(ForeignKey("user_groups.id", ondelete="CASCADE"), primary_key=True)
    user_id: Mapped[int] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True, index=True
    )


class RoleAssignment(Base):
    """A built-in role (domain/identity/roles.py, by Determined's id) held by a user or a group,
    on one workspace or (no workspace) cluster-wide. Gone with its user, group or workspace. One
    row per (role, holder, scope): kept so by domain/identity/role_assignments.py."""

    __tablename__ = "role_assignments"
    __table_args__ = (
        CheckConstraint("(user_id IS NULL) <> (group_id IS NULL)", name="ck_role_assignments_one_holder"),
        NEVER_REUSED,
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    role_id: Mapped[int] = mapped_column(Integer)
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    group_id: Mapped[int | None] = mapped_column(ForeignKey("user_groups.id", ondelete="CASCADE"), index=True)
    workspace_id: Mapped[int | None] = mapped_column(
        ForeignKey("workspaces.id", ondelete="CASCADE"), index=True
    )
    created_at: Mapped[datetime]


class UserSession(Base):
    __tablename__ = "user_sessions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    # sha256 of the token: a leaked database does not leak live sessions.
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    # "session" (a login) or "access" (an access token, `det token create`).
    token_type: Mapped[str] = mapped_column(String(16), default="session", server_default="session")
    # An access token's description; revoked_at: when it was revoked (its row stays).
    description: Mapped[str] = mapped_column(String(255), default="", server_default="")
    revoked_at: Mapped[datetime | None]


class Experiment(Base):
    __tablename__ = "experiments"
    __table_args__ = (
        UniqueConstraint("external_experiment_id", name="uq_experiments_external_id"),
        NEVER_REUSED,
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(512))
    description: Mapped[str] = mapped_column(Text, default="")
    labels: Mapped[list[Any]] = mapped_column(JSON, default=list)
    state: Mapped[str] = mapped_column(String(32), index=True)
    archived: Mapped[bool] = mapped_column(Boolean, default=False)
    # The expanded configuration (defaults filled in) and the text as submitted.
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    # Moves on every change of `config` after creation (edits, continue): read caches key on it.
    config_version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    original_config: Mapped[str] = mapped_column(Text)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    start_time: Mapped[datetime]
    end_time: Mapped[datetime | None]
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    resource_pool: Mapped[str] = mapped_column(String(255))
    searcher_session_id: Mapped[str] = mapped_column(String(64))
    # The checkpoint its trials start from (searcher.source_trial_id / source_checkpoint_uuid, as
    # resolved at creation; warm_start.py); None for a cold start.
    warm_start_checkpoint_uuid: Mapped[str | None] = mapped_column(String(64))
    model_definition_size: Mapped[int] = mapped_column(Integer, default=0)
    notes: Mapped[str] = mapped_column(Text, default="")
    parent_id: Mapped[int | None]
    project_id: Mapped[int] = mapped_column(
        ForeignKey("projects.id"), index=True, default=UNCATEGORIZED_PROJECT_ID
    )
    # Set once checkpoint GC has run after the experiment ended (owed until then: DeferredWork).
    checkpoint_gc_done: Mapped[bool] = mapped_column(Boolean, default=False)
    # Determined's unmanaged (detached) experiment: its code runs outside the cluster and sets its
    # trials' states itself; the master never schedules it nor asks a searcher about it.
    unmanaged: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # The id its code resumes it by (core_v2's external_experiment_id); unmanaged only.
    external_experiment_id: Mapped[str | None] = mapped_column(String(128))


class ModelDefinition(Base):
    """The experiment's context directory as a gzip'd tarball."""

    __tablename__ = "model_definitions"
    experiment_id: Mapped[int] = mapped_column(
        ForeignKey("experiments.id", ondelete="CASCADE"), primary_key=True
    )
    archive: Mapped[bytes] = mapped_column(LargeBinary)
    size: Mapped[int] = mapped_column(Integer)
    # SHA-256 (hex) of `archive`, sent with each start: agents keep archives by it. None for rows
    # stored before it was kept (migration 0014): their agents fetch every time, as before.
    digest: Mapped[str | None] = mapped_column(String(64))


class SearcherSnapshot(Base):
    """Where an experiment's search session stands: `seq`, the events it applied (advanced with
    the actions they produced), and a state to restore it from, that of `state_seq`; the events
    from there to `seq` are its SearcherReplay rows (searcher_pump.py says when a state is stored)."""

    __tablename__ = "searcher_snapshots"
    experiment_id: Mapped[int] = mapped_column(
        ForeignKey("experiments.id", ondelete="CASCADE"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(BigInteger)
    method: Mapped[str] = mapped_column(String(64))
    version: Mapped[int] = mapped_column(Integer)
    state: Mapped[bytes] = mapped_column(LargeBinary)
    state_seq: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    updated_at: Mapped[datetime]


class SearcherReplay(Base):
    """An event the search applied after its stored state (SearcherSnapshot.state_seq), in order
    of id: a session restored from that state is sent these again, and their answers, applied
    when they were first given, are dropped. Removed when a newer state is stored."""

    __tablename__ = "searcher_replays"
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiments.id", ondelete="CASCADE"), index=True)
    # A serialized cairn.searcher.v1.SearcherEvent.
    payload: Mapped[bytes] = mapped_column(LargeBinary)


class SearcherEvent(Base):
    """Outbox of events for the searcher, written in the transaction that caused them and removed in
    the transaction that applies the searcher's answer: no event is lost or applied twice."""

    __tablename__ = "searcher_events"
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiments.id", ondelete="CASCADE"), index=True)
    # A serialized cairn.searcher.v1.SearcherEvent.
    payload: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime]


class SearcherAnswer(Base):
    """The rest of a searcher's answer too big to apply in the call that got it (an experiment of
    10,000 trials): written with the answer's snapshot, applied in chunks by the searcher pump, each
    chunk in its own transaction that also stores what is left. Applying is idempotent (a trial is
    made once per request id), so a crash between chunks repeats nothing."""

    __tablename__ = "searcher_answers"
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiments.id", ondelete="CASCADE"), index=True)
    # A serialized cairn.searcher.v1.SearcherResponse holding only the actions still to apply.
    payload: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime]


class Trial(Base):
    __tablename__ = "trials"
    __table_args__ = (
        UniqueConstraint("experiment_id", "request_id", name="uq_trials_experiment_request"),
        NEVER_REUSED,
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiments.id", ondelete="CASCADE"), index=True)
    request_id: Mapped[str] = mapped_column(String(64))
    # The search session that last asked for this trial (Experiment.searcher_session_id then): a
    # continued search's new session asking for it again retries it (continuation.py).
    search_session_id: Mapped[str | None] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(32), index=True)
    hparams: Mapped[dict[str, Any]] = mapped_column(JSON)
    seed: Mapped[int] = mapped_column(BigInteger)
    # Failures counted against max_restarts (infrastructure failures are not counted).
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    # Number of allocations so far; the current allocation is run `run_id`.
    run_id: Mapped[int] = mapped_column(Integer, default=0)
    start_time: Mapped[datetime]
    end_time: Mapped[datetime | None]
    total_batches: Mapped[int] = mapped_column(BigInteger, default=0)
    # Promotion mode: the length the searcher wants the trial trained to (0: none).
    searcher_target: Mapped[int] = mapped_column(BigInteger, default=0)
    # The searcher stopped the trial (Determined: EarlyStoppedBySearcher).
    searcher_stopped: Mapped[bool] = mapped_column(Boolean, default=False)
    # The trial's code exited early (invalid hyperparameters, user-requested stop).
    early_exit_reason: Mapped[str | None] = mapped_column(String(64))
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    # The start forecast's pace (metrics/progress.py, scheduling/expected_runs.py): when progress
    # was last reported, and the first report of run `pace_run_id` (its progress and time).
    progress_at: Mapped[datetime | None]
    pace_run_id: Mapped[int | None]
    pace_progress: Mapped[float | None] = mapped_column(Float)
    pace_at: Mapped[datetime | None]
    latest_checkpoint_uuid: Mapped[str | None] = mapped_column(String(64))
    # The experiment's warm-start checkpoint when the trial was made (Determined's
    # warm_start_checkpoint_id): it starts from it until it has a checkpoint of its own.
    warm_start_checkpoint_uuid: Mapped[str | None] = mapped_column(String(64))
    searcher_metric_value: Mapped[float | None] = mapped_column(Float)
    summary_metrics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # The longest searcher operation the trial's code has reported complete (Core API).
    searcher_completed_length: Mapped[int] = mapped_column(BigInteger, default=0)
    best_validation_id: Mapped[int | None] = mapped_column(BigInteger)
    latest_validation_id: Mapped[int | None] = mapped_column(BigInteger)
    # What the trial's harness last said it was doing (Determined's runner metadata state).
    runner_status: Mapped[str] = mapped_column(Text, default="", server_default="")
    # Determined's run: archived apart from its experiment (runs API), and the metadata trial
    # code sets (core.train.set_metadata; None: never set).
    archived: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    run_metadata: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # An unmanaged trial's last heartbeat (PatchTrial): one silent too long is marked ERROR.
    last_activity: Mapped[datetime | None]
    # Its log lines matched a `cancel_retries` log policy: its next failure ends it (log_policies.py).
    log_policy_no_retry: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # The agents an `exclude_node` log policy matched on: its later runs are placed elsewhere.
    excluded_agents: Mapped[list[str] | None] = mapped_column(JSON)


class Task(Base):
    """Anything that runs on agents (Determined's task): a trial, a command, a generic task, and
    later notebooks, shells and TensorBoards. Its allocations are its runs; what it is for lives in
    `kind` and `config`. A trial's task id is "<experiment id>.<request id>" (task_ids.py), every
    other kind's a UUID, as Determined's clients expect."""

    __tablename__ = "tasks"
    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    # TRIAL, COMMAND, NOTEBOOK, SHELL, TENSORBOARD, GENERIC, CHECKPOINT_GC (states.TaskKind).
    kind: Mapped[str] = mapped_column(String(32), index=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    description: Mapped[str] = mapped_column(Text, default="")
    # The task's own config (a command's, a generic task's); None for a trial (its experiment's).
    config: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    job_id: Mapped[str] = mapped_column(String(128))
    # states.TaskState.
    state: Mapped[str] = mapped_column(String(32), index=True)
    start_time: Mapped[datetime]
    end_time: Mapped[datetime | None]
    # The exit code of its last allocation, once one has ended.
    exit_code: Mapped[int | None]
    # Why it ended, when it did not end by itself.
    exit_reason: Mapped[str | None] = mapped_column(Text)
    resource_pool: Mapped[str] = mapped_column(String(255), default="")
    slots: Mapped[int] = mapped_column(Integer, default=0)
    priority: Mapped[int | None]
    # How many allocations it has had (an allocation's id is "<task id>.<run>").
    run_id: Mapped[int] = mapped_column(Integer, default=0)
    workspace_id: Mapped[int | None] = mapped_column(ForeignKey("workspaces.id"), index=True)
    project_id: Mapped[int | None] = mapped_column(ForeignKey("projects.id"))
    # A trial's experiment: its task goes with it.
    experiment_id: Mapped[int | None] = mapped_column(
        ForeignKey("experiments.id", ondelete="CASCADE"), index=True
    )
    # Generic tasks (Determined's): the task that started it, the one it was forked from, and
    # whether it refuses to pause.
    parent_id: Mapped[str | None] = mapped_column(String(128))
    forked_from: Mapped[str | None] = mapped_column(String(128))
    no_pause: Mapped[bool] = mapped_column(Boolean, default=False)


class TaskContext(Base):
    """A task's context directory (gzip'd tar), fetched by agents as a trial's model definition is."""

    __tablename__ = "task_contexts"
    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True)
    archive: Mapped[bytes] = mapped_column(LargeBinary)
    size: Mapped[int] = mapped_column(Integer)
    # As ModelDefinition.digest.
    digest: Mapped[str | None] = mapped_column(String(64))


class ShellKey(Base):
    """A shell's SSH key pair, made by the master when the shell is launched (shell_keys.py): the
    public key goes to the shell's SSH server, the private key only to its owner or an admin."""

    __tablename__ = "shell_keys"
    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True)
    # OpenSSH formats: "-----BEGIN OPENSSH PRIVATE KEY-----..." and "ssh-ed25519 AAAA...".
    private_key: Mapped[str] = mapped_column(Text)
    public_key: Mapped[str] = mapped_column(Text)


class Allocation(Base):
    """One run of a task on agent slots (Determined's allocation)."""

    __tablename__ = "allocations"
    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"), index=True)
    # Set for a trial's allocations only (most of the trial lifecycle reads it).
    trial_id: Mapped[int | None] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"), index=True)
    run_id: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(32), index=True)
    slots: Mapped[int] = mapped_column(Integer)
    resource_pool: Mapped[str] = mapped_column(String(255))
    priority: Mapped[int | None]
    requested_at: Mapped[datetime]
    assigned_at: Mapped[datetime | None]
    start_time: Mapped[datetime | None]
    end_time: Mapped[datetime | None]
    # [{"agent_id": ..., "slot_ids": [...]}]
    placements: Mapped[list[Any]] = mapped_column(JSON, default=list)
    token_hash: Mapped[str] = mapped_column(String(64), index=True)
    exit_code: Mapped[int | None]
    exit_reason: Mapped[str | None] = mapped_column(Text)
    # Why it ended: "", "failed", "killed", "agent_failed", "task_error", "aborted", "preempted",
    # "device_failed".
    failure_type: Mapped[str] = mapped_column(String(32), default="")
    # Graceful stop requested (pause, cancel, searcher stop, scheduler preemption).
    preempt_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    # When (the start forecast measures how long a preempted allocation takes to give up its slots).
    preempt_requested_at: Mapped[datetime | None] = mapped_column(index=True)
    preempt_reason: Mapped[str] = mapped_column(String(255), default="")
    preempt_acked: Mapped[bool] = mapped_column(Boolean, default=False)
    kill_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    # When a graceful stop turns into a kill.
    kill_deadline: Mapped[datetime | None]
    is_ready: Mapped[bool] = mapped_column(Boolean, default=False)
    # The trial's searcher target when this allocation was placed (promotion mode).
    searcher_target: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # The container rank whose failure ended the allocation: its siblings were stopped because of
    # it, and the allocation counts as one failure. None while no container has failed.
    failed_rank: Mapped[int | None]
    # The allocation's block of meeting ports (see domain/allocations/rendezvous.py); None until placed.
    port_offset: Mapped[int | None]
    # Where a task that serves something (a notebook, TensorBoard, sshd) listens, as its proxy
    # reaches it; recorded here so that the proxy keeps working across a master restart.
    proxy_address: Mapped[str | None] = mapped_column(String(255))
    # Its task said it is exiting (NotifyAllocationExiting): its slots are offered to the next
    # allocation, whose container the agent starts once this one's has ended (an early hand-over).
    # Cleared when it ends.
    releasing: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class Container(Base):
    """The part of an allocation on one agent."""

    __tablename__ = "containers"
    id: Mapped[str] = mapped_column(String(160), primary_key=True)
    allocation_id: Mapped[str] = mapped_column(ForeignKey("allocations.id", ondelete="CASCADE"), index=True)
    agent_id: Mapped[str] = mapped_column(String(255), index=True)
    rank: Mapped[int] = mapped_column(Integer, default=0)
    slot_ids: Mapped[list[Any]] = mapped_column(JSON, default=list)
    state: Mapped[str] = mapped_column(String(32))
    exit_code: Mapped[int | None]
    # Highest event/log sequence number stored for the container (the agent's acked_seq).
    acked_seq: Mapped[int] = mapped_column(BigInteger, default=0)


class Agent(Base):
    __tablename__ = "agents"
    id: Mapped[str] = mapped_column(String(255), primary_key=True)
    resource_pool: Mapped[str] = mapped_column(String(255))
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    draining: Mapped[bool] = mapped_column(Boolean, default=False)
    hostname: Mapped[str] = mapped_column(String(255), default="")
    addresses: Mapped[list[Any]] = mapped_column(JSON, default=list)
    version: Mapped[str] = mapped_column(String(64), default="")
    runtime: Mapped[str] = mapped_column(String(32), default="process")
    registered_time: Mapped[datetime]
    last_seen: Mapped[datetime]
    connected: Mapped[bool] = mapped_column(Boolean, default=False)


class AgentJoinToken(Base):
    """A one-time join token: good for one enrolment before it expires (agent_credentials.py)."""

    __tablename__ = "agent_join_tokens"
    __table_args__ = NEVER_REUSED
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    # sha256 of the token; the token itself was shown once to whoever made it.
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    # The one agent id it may enrol; NULL: any id that holds no credential.
    agent_id: Mapped[str | None] = mapped_column(String(255))
    created_by: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    used_at: Mapped[datetime | None]
    used_by_agent: Mapped[str | None] = mapped_column(String(255))


class AgentEnrolmentSecret(Base):
    """The cluster's long-lived enrolment secret: the current one has no retired_at."""

    __tablename__ = "agent_enrolment_secrets"
    __table_args__ = NEVER_REUSED
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_by: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime]
    retired_at: Mapped[datetime | None]


class AgentCredential(Base):
    """The credential an agent id was issued (only its sha256), and its revocation."""

    __tablename__ = "agent_credentials"
    agent_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    # NULL: revoked before it ever enrolled (an agent that joined with the cluster token).
    secret_hash: Mapped[str | None] = mapped_column(String(64), unique=True)
    issued_at: Mapped[datetime | None]
    issued_with: Mapped[str] = mapped_column(String(64), default="")
    revoked_at: Mapped[datetime | None]
    revoked_by: Mapped[str] = mapped_column(String(255), default="")


class AgentSlot(Base):
    __tablename__ = "agent_slots"
    agent_id: Mapped[str] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"), primary_key=True)
    slot_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    device_type: Mapped[str] = mapped_column(String(16))
    brand: Mapped[str] = mapped_column(String(255), default="")
    uuid: Mapped[str] = mapped_column(String(64), default="")
    memory_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    device_index: Mapped[int] = mapped_column(Integer, default=0)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    draining: Mapped[bool] = mapped_column(Boolean, default=False)
    # Why the slot is out of service after its device failed ("" when healthy), and the time of
    # the latest fault acted on (scheduling/agents.py: slot health).
    unhealthy: Mapped[str] = mapped_column(String(512), default="")
    fault_at: Mapped[datetime | None]
    # Where the device sits (-1: unknown): packing a multi-GPU allocation prefers one domain/node.
    numa_node: Mapped[int] = mapped_column(Integer, default=-1)
    nvlink_domain: Mapped[int] = mapped_column(Integer, default=-1)


Index("ix_allocations_trial_state", Allocation.trial_id, Allocation.state)


class TaskSystemMetric(Base):
    """One container's system metrics over one sampling interval, as its agent measured them
    (domain/metrics/system_metrics.py). `gpus`: [[uuid, util %, memory used bytes, watts], ...].
    Rows older than the retention window are thinned to one per container and period (`thinned`
    marks the survivors, which stand for their period)."""

    __tablename__ = "task_system_metrics"
    __table_args__ = (
        Index("ix_task_system_metrics_task_id_at", "task_id", "at"),
        Index("ix_task_system_metrics_trial_id_id", "trial_id", "id"),
        Index("ix_task_system_metrics_thinned_at", "thinned", "at"),
        NEVER_REUSED,
    )
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    task_id: Mapped[str] = mapped_column(String(128))
    trial_id: Mapped[int | None] = mapped_column(Integer)
    allocation_id: Mapped[str] = mapped_column(String(128))
    container_id: Mapped[str] = mapped_column(String(160))
    agent_id: Mapped[str] = mapped_column(String(255))
    at: Mapped[datetime]
    cpu_util: Mapped[float] = mapped_column(Float)
    memory_bytes: Mapped[int] = mapped_column(BigInteger)
    disk_read_bytes_per_s: Mapped[float | None] = mapped_column(Float)
    disk_write_bytes_per_s: Mapped[float | None] = mapped_column(Float)
    net_recv_bytes_per_s: Mapped[float | None] = mapped_column(Float)
    net_sent_bytes_per_s: Mapped[float | None] = mapped_column(Float)
    processes: Mapped[int] = mapped_column(Integer)
    gpus: Mapped[list[Any]] = mapped_column(JSON)
    thinned: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class TaskLog(Base):
    """One line of a task's output. (container_id, seq) makes a resent line a no-op."""

    __tablename__ = "task_logs"
    __table_args__ = (
        UniqueConstraint("container_id", "seq", name="uq_task_logs_container_seq"),
        Index("ix_task_logs_trial_id_id", "trial_id", "id"),
        Index("ix_task_logs_task_id_id", "task_id", "id"),
        NEVER_REUSED,
    )
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    task_id: Mapped[str] = mapped_column(String(128))
    # A trial's lines carry its id too (TrialLogs reads by it).
    trial_id: Mapped[int | None] = mapped_column(Integer)
    allocation_id: Mapped[str] = mapped_column(String(128))
    container_id: Mapped[str] = mapped_column(String(160))
    seq: Mapped[int] = mapped_column(BigInteger)
    agent_id: Mapped[str] = mapped_column(String(255), default="")
    rank: Mapped[int | None]
    stdtype: Mapped[str] = mapped_column(String(16), default="stdout")
    level: Mapped[str] = mapped_column(String(16), default="")
    source: Mapped[str] = mapped_column(String(32), default="task")
    timestamp: Mapped[datetime]
    message: Mapped[str] = mapped_column(Text)


class Metric(Base):
    """One metrics report of a trial (training, validation or a custom group)."""

    __tablename__ = "metrics"
    __table_args__ = (
        # A report resent with the same sequence number is stored once (NULL seq: Determined clients).
        UniqueConstraint("trial_id", "trial_run_id", "seq", name="uq_metrics_trial_run_seq"),
        Index("ix_metrics_trial_group_steps", "trial_id", "group_name", "steps_completed"),
        NEVER_REUSED,
    )
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    # No foreign key (migration 0013): PostgreSQL would check it per row, thousands a batch. Intake
    # holds the trial's row (FOR KEY SHARE) while it writes, and deletion locks the trials before it
    # deletes their metrics, so no row outlives its trial.
    trial_id: Mapped[int] = mapped_column(Integer)
    trial_run_id: Mapped[int] = mapped_column(Integer)
    seq: Mapped[int | None] = mapped_column(BigInteger)
    group_name: Mapped[str] = mapped_column(String(64))
    steps_completed: Mapped[int] = mapped_column(BigInteger)
    report_time: Mapped[datetime]
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON)
    batch_metrics: Mapped[list[Any] | None] = mapped_column(JSON)
    # Reports of an earlier run past the checkpoint a restart resumed from.
    archived: Mapped[bool] = mapped_column(Boolean, default=False)


class Checkpoint(Base):
    __tablename__ = "checkpoints"
    uuid: Mapped[str] = mapped_column(String(64), primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"), index=True)
    allocation_id: Mapped[str] = mapped_column(String(128))
    task_id: Mapped[str] = mapped_column(String(128))
    report_time: Mapped[datetime]
    state: Mapped[str] = mapped_column(String(32))
    resources: Mapped[dict[str, Any]] = mapped_column(JSON)
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSON)
    steps_completed: Mapped[int] = mapped_column(BigInteger)
    size: Mapped[int] = mapped_column(BigInteger, default=0)


# --- Workspaces and projects (Determined's): every experiment belongs to a project -----------------


class Workspace(Base):
    __tablename__ = "workspaces"
    __table_args__ = NEVER_REUSED
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    # NULL only for the built-in workspace until the first admin exists (see ensure_builtin_users).
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    archived: Mapped[bool] = mapped_column(Boolean, default=False)
    # The built-in workspace can be neither renamed, archived nor deleted.
    immutable: Mapped[bool] = mapped_column(Boolean, default=False)
    # "" while usable; DELETING / DELETE_FAILED while its deletion runs.
    state: Mapped[str] = mapped_column(String(32), default="")
    default_compute_pool: Mapped[str] = mapped_column(String(255), default="")
    default_aux_pool: Mapped[str] = mapped_column(String(255), default="")
    checkpoint_storage: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime]
    # The Linux account the workspace's tasks run as (Determined's agent_user_group), winning over
    # their owners' links: all four set or all NULL. domain/identity/agent_users.py checks them.
    agent_uid: Mapped[int | None] = mapped_column(Integer)
    agent_gid: Mapped[int | None] = mapped_column(Integer)
    agent_user: Mapped[str | None] = mapped_column(String(32))
    agent_group: Mapped[str | None] = mapped_column(String(32))


class PoolBinding(Base):
    """A resource pool bound to a workspace (`det rp bindings add`): a pool with any binding takes
    work only from the workspaces bound to it. Gone with its workspace."""

    __tablename__ = "pool_bindings"
    workspace_id: Mapped[int] = mapped_column(
        ForeignKey("workspaces.id", ondelete="CASCADE"), primary_key=True
    )
    # A pool of the master's config; no foreign key: pools live in the config, not the database.
    pool_name: Mapped[str] = mapped_column(String(255), primary_key=True, index=True)


class PoolShare(Base):
    """A workspace's (user_id 0), or one of its users', weight and quota in a fair-share pool
    (`cairn workspace set-quota`): its weight among its siblings, the slots it is guaranteed while
    it wants them, the slots it may never exceed (0: none). Gone with its workspace."""

    __tablename__ = "pool_shares"
    pool_name: Mapped[str] = mapped_column(String(255), primary_key=True)
    workspace_id: Mapped[int] = mapped_column(
        ForeignKey("workspaces.id", ondelete="CASCADE"), primary_key=True
    )
    # 0: the workspace itself; else a user's share within the workspace (no foreign key: 0 is no
    # user, and a user's share outlives nothing but its workspace).
    user_id: Mapped[int] = mapped_column(Integer, primary_key=True, default=0)
    weight: Mapped[float] = mapped_column(Float, default=1.0)
    guaranteed_slots: Mapped[int] = mapped_column(Integer, default=0)
    max_slots: Mapped[int] = mapped_column(Integer, default=0)


class Project(Base):
    __tablename__ = "projects"
    __table_args__ = (
        UniqueConstraint("workspace_id", "name", name="uq_projects_workspace_name"),
        NEVER_REUSED,
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id"), index=True)
    name: Mapped[str] = mapped_column(String(255))
    # Determined's project key: up to 5 characters, unique in the cluster.
    key: Mapped[str] = mapped_column(String(16), unique=True)
    description: Mapped[str] = mapped_column(Text, default="")
    # Determined's project notes: a list of {"name", "contents"}.
    notes: Mapped[list[Any]] = mapped_column(JSON, default=list)
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    archived: Mapped[bool] = mapped_column(Boolean, default=False)
    immutable: Mapped[bool] = mapped_column(Boolean, default=False)
    state: Mapped[str] = mapped_column(String(32), default="")
    created_at: Mapped[datetime]
    # The sequence number of its last change, for Determined's streaming updates (domain/streams).
    seq: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")


# --- Config templates -----------------------------------------------------------------------------


class Template(Base):
    """A named partial experiment config that `det experiment create --template` merges under."""

    __tablename__ = "templates"
    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id"), default=UNCATEGORIZED_WORKSPACE_ID)
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


# --- The model registry -------------------------------------------------------------------------------


class RegisteredModel(Base):
    __tablename__ = "models"
    __table_args__ = NEVER_REUSED
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    description: Mapped[str] = mapped_column(Text, default="")
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    labels: Mapped[list[Any]] = mapped_column(JSON, default=list)
    notes: Mapped[str] = mapped_column(Text, default="")
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id"), default=UNCATEGORIZED_WORKSPACE_ID)
    archived: Mapped[bool] = mapped_column(Boolean, default=False)
    creation_time: Mapped[datetime]
    last_updated_time: Mapped[datetime]
    # The sequence number of its last change, for Determined's streaming updates (domain/streams).
    seq: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")


class ModelVersion(Base):
    """A version of a registered model: a checkpoint. The foreign key keeps a registered
    checkpoint's row (and so, by the GC's rule, its files) for as long as the version exists."""

    __tablename__ = "model_versions"
    __table_args__ = (
        UniqueConstraint("model_id", "version", name="uq_model_versions_model_version"),
        NEVER_REUSED,
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"), index=True)
    version: Mapped[int] = mapped_column(Integer)
    checkpoint_uuid: Mapped[str] = mapped_column(ForeignKey("checkpoints.uuid"), index=True)
    name: Mapped[str] = mapped_column(String(255), default="")
    comment: Mapped[str] = mapped_column(Text, default="")
    notes: Mapped[str] = mapped_column(Text, default="")
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    labels: Mapped[list[Any]] = mapped_column(JSON, default=list)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    creation_time: Mapped[datetime]
    last_updated_time: Mapped[datetime]
    # The sequence number of its last change, for Determined's streaming updates (domain/streams).
    seq: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")


# --- Work the master owes ---------------------------------------------------------------------------


class DeferredWork(Base):
    """A side effect the master owes (checkpoint GC, a deletion): written in the transaction that
    owes it, run by the deferred-work loop until it is done, then deleted. One row per (kind,
    subject); owing it again moves `revision`, so a run that started before does not count as it."""

    __tablename__ = "deferred_work"
    __table_args__ = (UniqueConstraint("kind", "subject_id", name="uq_deferred_work_kind_subject"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(64))
    subject_id: Mapped[int] = mapped_column(Integer)
    revision: Mapped[int] = mapped_column(Integer, default=1)
    due_at: Mapped[datetime] = mapped_column(index=True)
    # Failed runs since it was last owed, and what the last one said.
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str] = mapped_column(Text, default="")
    # The master running it, and until when its claim holds (it renews it while it runs).
    claimed_by: Mapped[str] = mapped_column(String(64), default="")
    claimed_until: Mapped[datetime | None]
    created_at: Mapped[datetime]


# --- Webhooks (Determined's): where the master posts events, and the outbox of owed posts ----------


class Webhook(Base):
    """A receiver's URL, the payload shape it takes (DEFAULT or SLACK), and which experiments it
    hears: every one of its workspace (or of all, with no workspace), or only those that name it."""

    __tablename__ = "webhooks"
    __table_args__ = NEVER_REUSED
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    url: Mapped[str] = mapped_column(Text)
    webhook_type: Mapped[str] = mapped_column(String(16))
    mode: Mapped[str] = mapped_column(String(16))
    workspace_id: Mapped[int | None] = mapped_column(
        ForeignKey("workspaces.id", ondelete="CASCADE"), index=True
    )
    created_at: Mapped[datetime]


class WebhookTrigger(Base):
    """What fires a webhook: a trigger type and its condition ({"state": ...} or {"regex": ...})."""

    __tablename__ = "webhook_triggers"
    __table_args__ = NEVER_REUSED
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    webhook_id: Mapped[int] = mapped_column(ForeignKey("webhooks.id", ondelete="CASCADE"), index=True)
    trigger_type: Mapped[str] = mapped_column(String(32), index=True)
    condition: Mapped[dict[str, Any]] = mapped_column(JSON)


class WebhookTaskLogMatch(Base):
    """A task-log trigger fired for a task: it fires once per task, however many lines match (and
    however often a line is resent)."""

    __tablename__ = "webhook_task_log_matches"
    __table_args__ = (UniqueConstraint("task_id", "trigger_id", name="uq_webhook_task_log_matches"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    task_id: Mapped[str] = mapped_column(String(128))
    trigger_id: Mapped[int] = mapped_column(ForeignKey("webhook_triggers.id", ondelete="CASCADE"), index=True)


class WebhookEvent(Base):
    """A post the master owes a receiver: written in the transaction of the change that caused it,
    sent by the webhook sender (domain/webhooks/sender.py), deleted once delivered or given up.
    The payload is the exact body sent (and signed)."""

    __tablename__ = "webhook_events"
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    url: Mapped[str] = mapped_column(Text)
    payload: Mapped[str] = mapped_column(Text)
    due_at: Mapped[datetime] = mapped_column(index=True)
    # Failed sends so far, and what the last one said.
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str] = mapped_column(Text, default="")
    # The master sending it, and until when its claim holds.
    claimed_by: Mapped[str] = mapped_column(String(64), default="")
    claimed_until: Mapped[datetime | None]
    created_at: Mapped[datetime]


# --- Dynamic agents -------------------------------------------------------------------------------


class ProvisionedInstance(Base):
    """An instance the provisioner launched for a pool (its id is also its agent's id). Recorded
    before the provider is asked, so a master that dies mid-launch finds it on restart and asks
    again with the same id (providers launch idempotently by id): nothing launched twice."""

    __tablename__ = "provisioned_instances"
    id: Mapped[str] = mapped_column(String(255), primary_key=True)
    resource_pool: Mapped[str] = mapped_column(String(255), index=True)
    provider: Mapped[str] = mapped_column(String(32))
    # provisioning.decide.Phase, changed only through provisioning.instances.transition.
    phase: Mapped[str] = mapped_column(String(16))
    launched_at: Mapped[datetime]
    connected_at: Mapped[datetime | None]
    idle_since: Mapped[datetime | None]
    disconnected_since: Mapped[datetime | None]
    drain_reason: Mapped[str | None] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(String(1024), default="")
    ended_at: Mapped[datetime | None]


class ProvisionerEvent(Base):
    """One of the provisioner's recent decisions or provider failures, with its reason."""

    __tablename__ = "provisioner_events"
    __table_args__ = (Index("ix_provisioner_events_pool_id", "resource_pool", "id"), NEVER_REUSED)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    resource_pool: Mapped[str] = mapped_column(String(255))
    at: Mapped[datetime]
    action: Mapped[str] = mapped_column(String(32))
    instance_id: Mapped[str | None] = mapped_column(String(255))
    message: Mapped[str] = mapped_column(String(2048))


# --- The audit trail -------------------------------------------------------------------------------


class AuditEvent(Base):
    """One call that changed something, or tried to (domain/audit/): who, what, on which objects,
    from where, when and how it ended. Appended in batches by the recorder, never updated, pruned
    oldest first by the retention loop."""

    __tablename__ = "audit_events"
    __table_args__ = (
        Index("ix_audit_events_username_id", "username", "id"),
        Index("ix_audit_events_user_id_id", "user_id", "id"),
        NEVER_REUSED,
    )
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    at: Mapped[datetime] = mapped_column(index=True)
    user_id: Mapped[int | None] = mapped_column(Integer)
    username: Mapped[str] = mapped_column(String(128), default="")
    # audit.events.ACTORS: user, allocation, agent, cluster, anonymous.
    actor: Mapped[str] = mapped_column(String(16))
    allocation_id: Mapped[str] = mapped_column(String(128), default="")
    method: Mapped[str] = mapped_column(String(128))
    # " key=value key=value " (audit/targets.py): searched by whole token.
    targets: Mapped[str] = mapped_column(String(2048), default="")
    outcome: Mapped[str] = mapped_column(String(32))
    error: Mapped[str] = mapped_column(String(512), default="")
    address: Mapped[str] = mapped_column(String(128), default="")
    transport: Mapped[str] = mapped_column(String(8), default="")
    duration_ms: Mapped[float] = mapped_column(Float, default=0.0)

"""Stored rows → public API messages."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from google.protobuf import struct_pb2
from google.protobuf.timestamp_pb2 import Timestamp

from cairn import DETERMINED_API_VERSION
from cairn.api.v1 import (
    agent_pb2,
    auth_pb2,
    checkpoint_pb2,
    common_pb2,
    experiment_pb2,
    trial_pb2,
    workspace_pb2,
)
from services.common.lru import BoundedLru
from services.master.domain.identity.agent_users import AgentUserGroup, AgentUserGroupRequest
from services.master.domain.identity.auth import UserInfo
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.paging import Page
from services.master.domain.kernel.task_ids import trial_task_id
from services.master.domain.reads.jobs import experiment_job_id
from services.master.domain.reads.listings import ExperimentConfig, ExperimentRow, TrialRow
from services.master.store import models

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def ts(value: datetime | None) -> Timestamp | None:
    """A Timestamp of a datetime (naive ones are UTC, as Timestamp.FromDatetime takes them),
    by integer arithmetic: FromDatetime's time tuples cost a tenth of building a metrics reply."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    delta = value - _EPOCH
    return Timestamp(seconds=delta.days * 86400 + delta.seconds, nanos=delta.microseconds * 1000)


def struct(value: dict[str, Any] | None) -> struct_pb2.Struct:
    result = struct_pb2.Struct()
    if value:
        result.update(value)
    return result


def optional_field(message: Any, field: str) -> Any:
    """A proto3 `optional` field's value, None when the caller left it unset (a PATCH's "no
    change" as against a change to the zero value)."""
    return getattr(message, field) if message.HasField(field) else None


def pagination(page: Page) -> common_pb2.Pagination:
    return common_pb2.Pagination(
        offset=page.offset, limit=page.limit, start_index=page.start, end_index=page.end, total=page.total
    )


def agent_user_group_request(message: Any) -> AgentUserGroupRequest | None:
    """A request's agent_user_group as sent (None: the request does not touch it)."""
    if not message.HasField("agent_user_group"):
        return None
    group = message.agent_user_group
    return AgentUserGroupRequest(
        uid=optional_field(group, "agent_uid"),
        gid=optional_field(group, "agent_gid"),
        user=optional_field(group, "agent_user"),
        group=optional_field(group, "agent_group"),
    )


def agent_user_group(link: AgentUserGroup | None) -> workspace_pb2.AgentUserGroup | None:
    """A stored link as Determined shows it; None (the field unset) where there is none."""
    if link is None:
        return None
    return workspace_pb2.AgentUserGroup(
        agent_uid=link.uid, agent_gid=link.gid, agent_user=link.user, agent_group=link.group
    )


def user(info: UserInfo) -> auth_pb2.User:
    return auth_pb2.User(
        id=info.id,
        username=info.username,
        admin=info.admin,
        active=info.active,
        display_name=info.display_name,
        modified_at=info.modified_at,
        last_auth_at=info.last_auth_at,
        agent_user_group=agent_user_group(info.agent_user_group),
        remote=info.remote,
    )


class _StaticParts:
    """The converted form of an experiment's config (as Structs, the text as submitted, searcher
    facts) for one config version, kept as serialized message bytes: merging bytes into a new
    message is far cheaper than building Structs from dicts on every read."""

    def __init__(self, max_entries: int = 20_000) -> None:
        self._entries: BoundedLru[tuple[tuple[int, datetime, int], bool], bytes] = BoundedLru(max_entries)

    def bytes_of(self, static: ExperimentConfig, *, with_config: bool = True) -> bytes:
        key = (static.key, with_config)
        found = self._entries.get(key)
        if found is not None:
            return found
        config = static.config
        searcher = config.get("searcher") or {}
        message = experiment_pb2.Experiment(
            searcher_type=str(searcher.get("name", "")),
            searcher_metric=str(searcher.get("metric", "")),
            hyperparameters=struct(config.get("hyperparameters") or {}),
            smaller_is_better=static.smaller_is_better,
        )
        if with_config:
            message.config.CopyFrom(struct(config))
            message.original_config = static.original_config
        else:
            message.config.SetInParent()  # present but empty: Determined's clients require the key
        data = message.SerializeToString()
        self._entries.put(key, data)
        return data


STATIC_PARTS = _StaticParts()


def config_struct(static: ExperimentConfig) -> struct_pb2.Struct:
    message = experiment_pb2.Experiment.FromString(STATIC_PARTS.bytes_of(static))
    return message.config


def experiment(row: ExperimentRow, *, with_config: bool = True) -> experiment_pb2.Experiment:
    exp = row.experiment
    end = exp.end_time or utcnow()
    message = experiment_pb2.Experiment.FromString(STATIC_PARTS.bytes_of(row.static, with_config=with_config))
    message.MergeFrom(
        experiment_pb2.Experiment(
            id=exp.id,
            description=exp.description,
            labels=list(exp.labels or []),
            start_time=ts(exp.start_time),
            end_time=ts(exp.end_time),
            # As Determined answers it: ACTIVE shown as QUEUED/PULLING/STARTING/RUNNING.
            state=experiment_pb2.Experiment.State.Value(f"STATE_{row.state}"),
            archived=exp.archived,
            num_trials=len(row.trials.trial_ids),
            trial_ids=row.trials.trial_ids,
            display_name=row.display_name,
            user_id=exp.owner_id,
            username=row.username,
            resource_pool=exp.resource_pool,
            name=exp.name,
            notes=exp.notes,
            job_id=experiment_job_id(exp.id),
            progress=exp.progress,
            checkpoint_size=row.checkpoint_size,
            checkpoint_count=row.checkpoint_count,
            duration=int((end - exp.start_time).total_seconds() * 1000),
            model_definition_size=exp.model_definition_size,
            unmanaged=exp.unmanaged,
        )
    )
    if exp.parent_id is not None:
        message.forked_from = exp.parent_id
    place = row.place
    if place is not None:
        message.project_id = place.project_id
        message.project_name = place.project_name
        message.project_owner_id = place.project_owner_id
        message.workspace_id = place.workspace_id
        message.workspace_name = place.workspace_name
        message.parent_archived = place.parent_archived
    if row.trials.best_metric is not None and row.trials.best_trial_id is not None:
        message.best_trial_searcher_metric = row.trials.best_metric
        message.best_trial_id = row.trials.best_trial_id
    return message


def metrics_workload(metric: models.Metric | None) -> trial_pb2.MetricsWorkload | None:
    if metric is None:
        return None
    return trial_pb2.MetricsWorkload(
        end_time=ts(metric.report_time),
        metrics=common_pb2.Metrics(avg_metrics=struct(metric.metrics)),
        num_inputs=0,
        total_batches=int(metric.steps_completed),
    )


def checkpoint_state(state: str) -> checkpoint_pb2.Checkpoint.State.ValueType:
    return checkpoint_pb2.Checkpoint.State.Value(f"STATE_{state}")


def trial(row: TrialRow) -> trial_pb2.Trial:
    t = row.trial
    alloc = row.allocation
    end = t.end_time or utcnow()
    message = trial_pb2.Trial(
        id=t.id,
        experiment_id=t.experiment_id,
        start_time=ts(t.start_time),
        end_time=ts(t.end_time),
        state=trial_pb2.Trial.State.Value(f"STATE_{row.state}"),
        restarts=t.restarts,
        hparams=struct(t.hparams),
        total_batches_processed=int(t.total_batches),
        runner_state=alloc.state if alloc is not None else "",
        wall_clock_time=(end - t.start_time).total_seconds(),
        task_id=trial_task_id(t.experiment_id, t.request_id),
        total_checkpoint_size=row.checkpoint_size,
        checkpoint_count=row.checkpoint_count,
        summary_metrics=struct(t.summary_metrics),
        task_ids=row.task_ids,
        request_id=t.request_id,
        seed=int(t.seed),
        allocation_id=alloc.id if alloc is not None else "",
        run_id=t.run_id,
        searcher_target=int(t.searcher_target),
        latest_checkpoint_uuid=t.latest_checkpoint_uuid or "",
        warm_start_checkpoint_uuid=t.warm_start_checkpoint_uuid or "",
        runner_status=t.runner_status or "",
    )
    if t.searcher_metric_value is not None:
        message.searcher_metric_value = t.searcher_metric_value
    best = metrics_workload(row.best_validation)
    if best is not None:
        message.best_validation.CopyFrom(best)
    latest = metrics_workload(row.latest_validation)
    if latest is not None:
        message.latest_validation.CopyFrom(latest)
    if row.best_checkpoint is not None:
        ck = row.best_checkpoint
        message.best_checkpoint.CopyFrom(
            trial_pb2.CheckpointWorkload(
                uuid=ck.uuid,
                end_time=ts(ck.report_time),
                state=checkpoint_state(ck.state),
                resources={k: int(v) for k, v in ck.resources.items()},
                total_batches=int(ck.steps_completed),
                metadata=struct(ck.metadata_),
            )
        )
    return message


DEVICE_TYPES = {
    "cpu": common_pb2.TYPE_CPU,
    "cuda": common_pb2.TYPE_CUDA,
    "rocm": common_pb2.TYPE_ROCM,
}

CONTAINER_STATES = {
    "ASSIGNED": agent_pb2.Container.STATE_ASSIGNED,
    "PULLING": agent_pb2.Container.STATE_PULLING,
    "STARTING": agent_pb2.Container.STATE_STARTING,
    "RUNNING": agent_pb2.Container.STATE_RUNNING,
    "TERMINATING": agent_pb2.Container.STATE_RUNNING,
    "TERMINATED": agent_pb2.Container.STATE_TERMINATED,
}


def device(slot: models.AgentSlot) -> agent_pb2.Device:
    return agent_pb2.Device(
        id=slot.device_index,
        brand=slot.brand,
        uuid=slot.uuid,
        type=DEVICE_TYPES.get(slot.device_type, common_pb2.TYPE_CPU),
        memory_bytes=slot.memory_bytes,
    )


def slot(
    slot_row: models.AgentSlot,
    agent_row: models.Agent,
    holder: models.Allocation | None,
) -> agent_pb2.Slot:
    message = agent_pb2.Slot(
        id=slot_row.slot_id,
        device=device(slot_row),
        enabled=slot_row.enabled and agent_row.enabled,
        draining=slot_row.draining or agent_row.draining,
        unhealthy=slot_row.unhealthy,
    )
    if holder is not None:
        # The allocation's container on this agent: "<allocation>.<container rank>" (one per agent).
        rank = next(
            (i for i, p in enumerate(holder.placements) if p.get("agent_id") == agent_row.id),
            0,
        )
        message.container.CopyFrom(
            agent_pb2.Container(
                parent=holder.id,
                id=f"{holder.id}.{rank}",
                state=CONTAINER_STATES.get(holder.state, agent_pb2.Container.STATE_UNSPECIFIED),
                devices=[device(slot_row)],
            )
        )
    return message


def agent(
    agent_row: models.Agent,
    slots: list[models.AgentSlot],
    holders: dict[tuple[str, str], models.Allocation],
    *,
    connected: bool,
    last_heard: datetime | None = None,
    include_slots: bool = True,
    include_containers: bool = True,
) -> agent_pb2.Agent:
    message = agent_pb2.Agent(
        id=agent_row.id,
        registered_time=ts(agent_row.registered_time),
        addresses=list(agent_row.addresses or []),
        enabled=agent_row.enabled,
        draining=agent_row.draining,
        version=DETERMINED_API_VERSION,
        cairn_version=agent_row.version,
        resource_pools=[agent_row.resource_pool],
        connected=connected,
        last_heartbeat=ts(last_heard or agent_row.last_seen),
        hostname=agent_row.hostname,
    )
    type_stats: dict[str, agent_pb2.DeviceStats] = {}
    for slot_row in slots:
        holder = holders.get((agent_row.id, slot_row.slot_id))
        slot_message = slot(slot_row, agent_row, holder)
        if include_slots:
            message.slots[slot_row.slot_id].CopyFrom(slot_message)
        if include_containers and holder is not None and holder.id not in message.containers:
            message.containers[holder.id].CopyFrom(slot_message.container)
        type_name = common_pb2.DeviceType.Name(DEVICE_TYPES.get(slot_row.device_type, common_pb2.TYPE_CPU))
        stats = type_stats.setdefault(type_name, agent_pb2.DeviceStats())
        stats.total += 1
        if not slot_message.enabled:
            stats.disabled += 1
        if slot_message.draining:
            stats.draining += 1
        if holder is not None:
            state_name = agent_pb2.Container.State.Name(slot_message.container.state)
            stats.states[state_name] = stats.states.get(state_name, 0) + 1
    for name, stats in type_stats.items():
        message.slot_stats.type_stats[name].CopyFrom(stats)
    return message

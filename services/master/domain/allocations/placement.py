"""An allocation placed: the scheduler's assignment applied (containers on the chosen agents and
slots, the allocation's port offset, the start command each agent is sent), and the port offsets
that keep live allocations' meeting ports apart."""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, cast

from sqlalchemy import bindparam, func, select

from cairn.agent.v1 import agent_pb2 as apb
from services.master.domain.allocations.allocations import transition
from services.master.domain.allocations.command_spec import build_command_spec
from services.master.domain.allocations.rendezvous import (
    PORT_BLOCKS,
    agent_address,
    cluster_port_shift,
    rendezvous_for,
)
from services.master.domain.allocations.task_services import service_environment, service_mounts
from services.master.domain.allocations.task_spec import ExperimentParts, build_task_spec, experiment_parts
from services.master.domain.identity import agent_users
from services.master.domain.identity.auth import hash_token, new_token
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.states import LIVE_ALLOCATION
from services.master.domain.kernel.states import AllocationState as A
from services.master.store import models


def _run_as(link: agent_users.AgentUserGroup | None) -> apb.RunAs | None:
    """The Linux account the task runs as (agent_users.for_task); None: the agent's task user."""
    if link is None:
        return None
    return apb.RunAs(uid=link.uid, gid=link.gid, user=link.user, group=link.group)


class _TrialSpecRows(NamedTuple):
    trial: models.Trial
    experiment: models.Experiment
    owner: models.User
    workspace: models.Workspace | None
    digest: str | None


_TRIAL_SPEC_READ = (
    select(models.Trial, models.Experiment, models.User, models.Workspace, models.ModelDefinition.digest)
    .join(models.Experiment, models.Experiment.id == models.Trial.experiment_id)
    .join(models.User, models.User.id == models.Experiment.owner_id)
    .outerjoin(models.Project, models.Project.id == models.Experiment.project_id)
    .outerjoin(models.Workspace, models.Workspace.id == models.Project.workspace_id)
    .outerjoin(models.ModelDefinition, models.ModelDefinition.experiment_id == models.Experiment.id)
)
_TRIAL_SPEC = _TRIAL_SPEC_READ.where(models.Trial.id == bindparam("id"))
# A batch's reads, built once (a statement built anew cost about what running it did): its trials,
# then their experiments with their owners, workspaces and archives' digests apart. A batch's
# trials share a few experiments, and each joined row decoded its experiment's config, its owner
# and its workspace again (54 against 18 us a trial, 100 trials of one experiment).
_TRIALS = select(models.Trial).where(models.Trial.id.in_(bindparam("ids", expanding=True)))
_EXPERIMENT_SPECS = (
    select(models.Experiment, models.User, models.Workspace, models.ModelDefinition.digest)
    .join(models.User, models.User.id == models.Experiment.owner_id)
    .outerjoin(models.Project, models.Project.id == models.Experiment.project_id)
    .outerjoin(models.Workspace, models.Workspace.id == models.Project.workspace_id)
    .outerjoin(models.ModelDefinition, models.ModelDefinition.experiment_id == models.Experiment.id)
    .where(models.Experiment.id.in_(bindparam("ids", expanding=True)))
)
_ADDRESSES = select(models.Agent.id, models.Agent.addresses).where(
    models.Agent.id.in_(bindparam("ids", expanding=True))
)


@dataclass
class _Preloaded:
    """What `preload` read for a batch of starts."""

    trials: dict[int, _TrialSpecRows] = field(default_factory=dict)
    addresses: dict[str, str] = field(default_factory=dict)


_PRELOADED = "allocations.placement.preloaded"
_EXPERIMENT_PARTS = "allocations.placement.experiment_parts"


def _preloaded(w: Work) -> _Preloaded:
    found = w.memo.get(_PRELOADED)
    return found if isinstance(found, _Preloaded) else _Preloaded()


def preload(w: Work, allocs: Iterable[models.Allocation], agent_ids: Iterable[str]) -> None:
    """Before a batch of starts in one unit of work (a scheduling pass applies them so): what each
    start reads of its trial, experiment, owner and workspace, and the agents' addresses, in two
    reads for the batch instead of two for each start. None of it is changed by the starts, so
    the reads need none of the unit's changes flushed first."""
    trial_ids = [a.trial_id for a in allocs if a.trial_id is not None]
    found = _Preloaded()
    with w.session.no_autoflush:
        if trial_ids:
            trials = w.session.scalars(_TRIALS, {"ids": trial_ids}).all()
            experiments = {
                row[0].id: row
                for row in w.session.execute(
                    _EXPERIMENT_SPECS, {"ids": list({trial.experiment_id for trial in trials})}
                )
            }
            for trial in trials:
                if trial.experiment_id in experiments:  # as the joined read: else read alone
                    found.trials[trial.id] = _TrialSpecRows(trial, *experiments[trial.experiment_id])
        for agent_id, agent_addresses in w.session.execute(_ADDRESSES, {"ids": list(agent_ids)}):
            found.addresses[agent_id] = agent_address(agent_addresses)
    w.memo[_PRELOADED] = found


def _spec_for(ctx: MasterContext, w: Work, alloc: models.Allocation, token: str) -> apb.TaskSpec:
    """What the agents run: a trial's harness and environment, or a task's own command, as the
    Linux account its workspace or owner is linked to."""
    if alloc.trial_id is None:
        task = w.session.get_one(models.Task, alloc.task_id)
        owner = w.session.get_one(models.User, task.owner_id)
        spec = build_command_spec(ctx.settings, task, alloc, token, owner.username)
        run_as = _run_as(agent_users.for_task_of(w.session, task.owner_id, task.workspace_id))
        if run_as is not None:
            spec.run_as.CopyFrom(run_as)
        spec.environment.update(service_environment(ctx, w, task, alloc))
        spec.mounts.extend(service_mounts(w, task))
        digest = w.session.scalar(
            select(models.TaskContext.digest).where(models.TaskContext.task_id == task.id)
        )
        spec.context_digest = digest or ""
        return spec
    found = _preloaded(w).trials.get(alloc.trial_id)
    if found is None:
        # One read for the trial, its experiment, its owner, its workspace and the archive's
        # digest (the column alone: the archive itself is not read here; the agent fetches it,
        # when it must). Four reads, the first flushing the allocation's changes, were a third
        # of a hand-over's assignment.
        with w.session.no_autoflush:
            row = w.session.execute(_TRIAL_SPEC, {"id": alloc.trial_id}).one()
        found = _TrialSpecRows(*row)
    trial, exp, owner, workspace, digest = found
    alloc.searcher_target = trial.searcher_target
    # What the spec takes from the experiment's config alone, once for its trials of this unit.
    parts_by_experiment = cast(dict[int, ExperimentParts], w.memo.setdefault(_EXPERIMENT_PARTS, {}))
    parts = parts_by_experiment.get(exp.id)
    if parts is None:
        parts = parts_by_experiment[exp.id] = experiment_parts(exp.config)
    spec = build_task_spec(ctx.settings, exp, trial, alloc, token, owner.username, parts)
    spec.context_digest = digest or ""
    workspace_link = agent_users.of_row(workspace) if workspace is not None else None
    run_as = _run_as(agent_users.for_task(agent_users.of_row(owner), workspace_link))
    if run_as is not None:
        spec.run_as.CopyFrom(run_as)
    return spec


def assign(
    ctx: MasterContext,
    w: Work,
    alloc: models.Allocation,
    placements: list[dict[str, object]],
    port_offsets: PortOffsets | None,
    releasing: Mapping[str, tuple[str, set[str]]],
) -> None:
    """The scheduler placed the allocation: record it and tell the agents to start it, one container
    per agent, each with the allocation's rendezvous info and its own container rank.
    `port_offsets`: the live allocations' port offsets, when the caller keeps them (a pass that
    starts several); else they are counted from the database. `releasing`: the live containers of
    allocations that released their slots early (release_early) on these agents, id → (agent,
    slots); a start on their slots waits for them."""
    token = new_token()
    alloc.placements = placements
    alloc.token_hash = hash_token(token)
    if port_offsets is None:
        port_offsets = PortOffsets.counted(w)
    alloc.port_offset = port_offsets.take()
    spec = _spec_for(ctx, w, alloc, token)
    agent_ids = [str(p["agent_id"]) for p in placements]
    addresses = _preloaded(w).addresses
    if not all(agent_id in addresses for agent_id in agent_ids):
        # The agents' addresses need none of this unit's changes (it changes no agent): read
        # without flushing them, so the allocation's changes go out with the others' at the end.
        with w.session.no_autoflush:
            addresses = {
                agent_id: agent_address(agent_addresses)
                for agent_id, agent_addresses in w.session.execute(
                    select(models.Agent.id, models.Agent.addresses).where(models.Agent.id.in_(agent_ids))
                )
            }
    slot_lists = [[str(s) for s in p["slot_ids"]] for p in placements]  # type: ignore[attr-defined]
    container_addrs = [addresses.get(a, "") for a in agent_ids]
    slot_counts = [len(slots) for slots in slot_lists]
    shift = cluster_port_shift(ctx.cluster_id)
    for rank, (agent_id, slot_ids) in enumerate(zip(agent_ids, slot_lists, strict=True)):
        container_id = f"{alloc.id}.{rank}"
        w.session.add(
            models.Container(
                id=container_id,
                allocation_id=alloc.id,
                agent_id=agent_id,
                rank=rank,
                slot_ids=slot_ids,
                state=A.ASSIGNED,
                acked_seq=0,
            )
        )
        command = apb.MasterMessage(
            start=apb.StartContainer(
                command_id=uuid.uuid4().hex,
                container_id=container_id,
                allocation_id=alloc.id,
                slot_ids=slot_ids,
                spec=spec,
                rendezvous=rendezvous_for(container_addrs, slot_counts, rank, alloc.port_offset, shift),
                after_container_ids=sorted(
                    c_id
                    for c_id, (c_agent, c_slots) in releasing.items()
                    if c_agent == agent_id and c_slots & set(slot_ids)
                ),
            )
        )
        w.later(lambda a=agent_id, c=command: ctx.hub.send(a, c))  # type: ignore[misc]
    transition(ctx, w, alloc, A.ASSIGNED, f"placed on {', '.join(agent_ids)}")


class PortOffsets:
    """How many live allocations hold each port block (rendezvous.py), to give the next one the
    lowest free block."""

    def __init__(self, in_use: Iterable[tuple[int | None, int]]) -> None:
        self.counts = [0] * PORT_BLOCKS
        # The counts as a heap, from the first take on (counts change only through take then).
        self._heap: list[tuple[int, int]] | None = None
        for offset, holders in in_use:
            if offset is not None:
                self.counts[offset % PORT_BLOCKS] += holders

    @classmethod
    def counted(cls, w: Work) -> PortOffsets:
        # Counted by the database: a pass beside 10,000 live allocations reads a thousand counts
        # at most, not 10,000 offsets.
        return cls(
            (offset, holders)
            for offset, holders in w.session.execute(
                select(models.Allocation.port_offset, func.count())
                .where(
                    models.Allocation.state.in_(list(LIVE_ALLOCATION)),
                    models.Allocation.port_offset.is_not(None),
                )
                .group_by(models.Allocation.port_offset)
            )
        )

    @classmethod
    def of_counts(cls, counts: list[int]) -> PortOffsets:
        offsets = cls(())
        offsets.counts = list(counts)
        return offsets

    def take(self) -> int:
        """free_port_offset's choice, by a heap of (holders, offset) made at the first take: a
        pass that starts a hundred trials scanned the thousand blocks a hundred times."""
        if self._heap is None:
            self._heap = [(count, offset) for offset, count in enumerate(self.counts)]
            heapq.heapify(self._heap)
        count, offset = heapq.heappop(self._heap)
        self.counts[offset] = count + 1
        heapq.heappush(self._heap, (count + 1, offset))
        return offset

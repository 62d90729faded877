"""The job queue: Determined's `det job list` and `det job update`, for experiments and every other
kind of task (commands, notebooks, shells, TensorBoards, generic tasks), with why a waiting job
waits (the scheduler's reason, or the master's own hold such as an experiment's max_slots)."""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from cairn.api.v1 import common_pb2, experiment_pb2, job_pb2
from services.common.queue_order import QueueKey, effective_priority, queue_key
from services.master.domain.experiments import experiment_edits
from services.master.domain.experiments import experiments as lifecycle
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.errors import InvalidArgument, NotFound
from services.master.domain.kernel.paging import page_of
from services.master.domain.kernel.states import TaskKind
from services.master.domain.reads.jobs import EXPERIMENT, JobRow, experiment_of_job, queued_jobs
from services.master.domain.tasks import tasks
from services.master.servicers.api import convert
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.errors import rpc
from services.master.store import models

STATE = experiment_pb2.JobSummary.State
MAX_UPDATES = 1000
JOB_TYPES = {
    EXPERIMENT: job_pb2.Job.TYPE_EXPERIMENT,
    TaskKind.NOTEBOOK: job_pb2.Job.TYPE_NOTEBOOK,
    TaskKind.TENSORBOARD: job_pb2.Job.TYPE_TENSORBOARD,
    TaskKind.SHELL: job_pb2.Job.TYPE_SHELL,
    TaskKind.COMMAND: job_pb2.Job.TYPE_COMMAND,
    TaskKind.CHECKPOINT_GC: job_pb2.Job.TYPE_CHECKPOINT_GC,
    TaskKind.GENERIC: job_pb2.Job.TYPE_GENERIC,
}


@dataclass(frozen=True)
class TaskPriority:
    task_id: str
    kind: TaskKind
    priority: int


class JobsApi(ServicerBase):
    def _default_pool(self) -> str:
        pools = self.ctx.settings.pools
        return pools[0].name if pools else "default"

    def _effective_priority(self, job: JobRow) -> int:
        pool = next((p for p in self.ctx.settings.pools if p.name == job.resource_pool), None)
        return effective_priority(job.priority, pool.default_priority if pool is not None else None)

    def _queue_key(self, job: JobRow) -> tuple[bool, QueueKey]:
        """Scheduled work first, then the pool's queue order (a job has no request time of its own)."""
        submitted_ns = round(job.submitted_at.timestamp() * 1_000_000) * 1000
        return (not job.scheduled, queue_key(self._effective_priority(job), submitted_ns, 0, job.entity_id))

    def _waiting_reason(self, job: JobRow) -> str:
        """Why the job's waiting allocations wait: the first reason given for any of them."""
        reasons = self.deps.waiting.reasons
        for alloc_id in job.allocation_ids:
            reason = reasons.get(alloc_id, ("", 0))[0]
            if reason:
                return reason
        return ""

    @rpc
    def GetJobsV2(
        self, request: job_pb2.GetJobsV2Request, context: grpc.ServicerContext
    ) -> job_pb2.GetJobsV2Response:
        self.caller(context)
        pool = request.resource_pool or self._default_pool()
        experiments = self.readable(context, Permission.VIEW_EXPERIMENT_METADATA)
        nsc = self.readable(context, Permission.VIEW_NSC)
        with self.ctx.db.read() as s:
            jobs = [j for j in queued_jobs(s) if j.resource_pool == pool]
        jobs.sort(key=self._queue_key)
        messages = []
        listed: list[JobRow] = []  # the job of each message
        for ahead, job in enumerate(jobs):
            # The whole queue orders the jobs (a job's place counts every job ahead of it); the
            # caller is shown those of the workspaces they may read. The queue is bounded by the
            # live allocations, read once: filtered here, not in SQL.
            visible = experiments if job.kind == EXPERIMENT else nsc
            if visible is not None and job.workspace_id not in visible:
                continue
            state = STATE.STATE_SCHEDULED if job.scheduled else STATE.STATE_QUEUED
            if request.states and state not in request.states:
                continue
            message = job_pb2.Job(
                summary=experiment_pb2.JobSummary(state=state, jobs_ahead=ahead),
                type=JOB_TYPES.get(job.kind, job_pb2.Job.TYPE_UNSPECIFIED),
                submission_time=convert.ts(job.submitted_at),
                username=job.username,
                user_id=job.user_id,
                resource_pool=job.resource_pool,
                is_preemptible=job.preemptible,
                priority=self._effective_priority(job),
                weight=job.weight,
                entity_id=job.entity_id,
                job_id=job.job_id,
                requested_slots=job.requested_slots,
                allocated_slots=job.allocated_slots,
                name=job.name,
                workspace_id=job.workspace_id,
                # A job partly placed says why the rest of it waits (a quota, its fair share).
                waiting_reason=self._waiting_reason(job),
            )
            if job.progress is not None:
                message.progress = job.progress
            messages.append(message)
            listed.append(job)
        self._forecast(listed, messages)
        if request.order_by == common_pb2.ORDER_BY_DESC:
            messages.reverse()
        page = page_of(len(messages), request.offset, request.limit)
        return job_pb2.GetJobsV2Response(
            jobs=[job_pb2.RBACJob(full=m) for m in messages[page.start : page.end]],
            pagination=convert.pagination(page),
        )

    def _forecast(self, jobs: list[JobRow], messages: list[job_pb2.Job]) -> None:
        """Each job that waits for slots gets the forecast's start of its next waiting allocation
        (StartForecast.next_start: the forecast may be a moment older than the listing), and the
        job whose end lets it start (or why no start is forecast)."""
        waiting = [
            (job, m) for job, m in zip(jobs, messages, strict=True) if m.allocated_slots < m.requested_slots
        ]
        if not waiting or self.deps.forecasts is None:
            return
        forecast = self.deps.forecasts.current()
        now = utcnow()
        for job, message in waiting:
            message.forecast_time.FromDatetime(forecast.made_at)
            start = forecast.next_start(job.allocation_ids, job.pending_ids, now)
            if isinstance(start, str):
                message.predicted_after = start
                continue
            when, after = start
            message.predicted_start.FromDatetime(when)
            message.predicted_after = after or "free slots now"

    def _task_update(self, field: str, update: job_pb2.QueueControl) -> TaskPriority:
        """A queue change for a task's job (not an experiment's): its priority only."""
        with self.ctx.db.read() as s:
            task = s.get(models.Task, update.job_id) if len(update.job_id) <= 128 else None
        if task is None or task.kind == TaskKind.TRIAL:
            raise NotFound(f"{field}.job_id: no job {update.job_id[:80]!r}")
        if update.HasField("weight") or update.HasField("resource_pool"):
            raise InvalidArgument(
                f"{field}: a {str(task.kind).lower()}'s job can change its priority only (its pool "
                "and weight are fixed once it is queued)"
            )
        if not update.HasField("priority"):
            raise InvalidArgument(f"{field}: nothing to change (give a priority)")
        return TaskPriority(task.id, TaskKind(task.kind), update.priority)

    @rpc
    def UpdateJobQueue(
        self, request: job_pb2.UpdateJobQueueRequest, context: grpc.ServicerContext
    ) -> job_pb2.UpdateJobQueueResponse:
        principal = self.user(context)
        if len(request.updates) > MAX_UPDATES:
            raise InvalidArgument(f"updates: at most {MAX_UPDATES} per request (got {len(request.updates)})")
        edits: list[tuple[int, experiment_edits.ExperimentEdit]] = []
        task_priorities: list[TaskPriority] = []
        for index, update in enumerate(request.updates):
            field = f"updates[{index}]"
            if update.HasField("ahead_of") or update.HasField("behind_of"):
                raise InvalidArgument(
                    f"{field}: the priority scheduler orders its queue by priority and submission time; "
                    "set a priority instead of moving a job ahead of or behind another"
                )
            experiment_id = experiment_of_job(update.job_id)
            if experiment_id is None:
                task_priorities.append(self._task_update(field, update))
                continue
            edits.append(
                (
                    experiment_id,
                    experiment_edits.ExperimentEdit(
                        priority=update.priority if update.HasField("priority") else None,
                        weight=update.weight if update.HasField("weight") else None,
                        resource_pool=update.resource_pool if update.HasField("resource_pool") else None,
                    ),
                )
            )
        for change in task_priorities:
            tasks.check_priority(change.priority)
        # The experiments' changes all or nothing, in one transaction; then the tasks', each checked
        # (owner, range, still running) as it is applied.
        with self.ctx.unit_of_work() as w:
            for experiment_id, edit in edits:
                exp = lifecycle.load(w, experiment_id)
                lifecycle.check_can_modify(w.session, principal, exp)
                experiment_edits.apply(self.ctx, w, exp, edit)
        for change in task_priorities:
            tasks.set_priority(self.ctx, principal, change.task_id, change.kind, change.priority)
        return job_pb2.UpdateJobQueueResponse()

"""The job queue: Determined's `det job list` and `det job update`."""

from __future__ import annotations

import grpc

from cairn.api.v1 import common_pb2, experiment_pb2, job_pb2
from services.common.priority import DETERMINED_DEFAULT_PRIORITY
from services.master.domain import experiment_edits
from services.master.domain import experiments as lifecycle
from services.master.domain.errors import InvalidArgument, NotFound
from services.master.domain.paging import page_of
from services.master.domain.reads.jobs import JobRow, experiment_job_id, experiment_of_job, queued_jobs
from services.master.servicers.api import convert
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.errors import rpc

STATE = experiment_pb2.JobSummary.State
MAX_UPDATES = 1000


class JobsApi(ServicerBase):
    def _default_pool(self) -> str:
        pools = self.ctx.settings.pools
        return pools[0].name if pools else "default"

    def _effective_priority(self, job: JobRow) -> int:
        pool = next((p for p in self.ctx.settings.pools if p.name == job.resource_pool), None)
        default = (
            pool.default_priority
            if pool is not None and pool.default_priority
            else DETERMINED_DEFAULT_PRIORITY
        )
        return job.priority if job.priority is not None else default

    @rpc
    def GetJobsV2(
        self, request: job_pb2.GetJobsV2Request, context: grpc.ServicerContext
    ) -> job_pb2.GetJobsV2Response:
        self.caller(context)
        pool = request.resource_pool or self._default_pool()
        with self.ctx.db.read() as s:
            jobs = [j for j in queued_jobs(s) if j.resource_pool == pool]
        # The pool's queue order: scheduled work first, then by priority and submission.
        jobs.sort(
            key=lambda j: (not j.scheduled, self._effective_priority(j), j.submitted_at, j.experiment_id)
        )
        messages = []
        for ahead, job in enumerate(jobs):
            state = STATE.STATE_SCHEDULED if job.scheduled else STATE.STATE_QUEUED
            if request.states and state not in request.states:
                continue
            message = job_pb2.Job(
                summary=experiment_pb2.JobSummary(state=state, jobs_ahead=ahead),
                type=job_pb2.Job.TYPE_EXPERIMENT,
                submission_time=convert.ts(job.submitted_at),
                username=job.username,
                user_id=job.user_id,
                resource_pool=job.resource_pool,
                is_preemptible=True,
                priority=self._effective_priority(job),
                weight=job.weight,
                entity_id=str(job.experiment_id),
                job_id=experiment_job_id(job.experiment_id),
                requested_slots=job.requested_slots,
                allocated_slots=job.allocated_slots,
                name=job.name,
                progress=job.progress,
                workspace_id=job.workspace_id,
            )
            messages.append(message)
        if request.order_by == common_pb2.ORDER_BY_DESC:
            messages.reverse()
        page = page_of(len(messages), request.offset, request.limit)
        return job_pb2.GetJobsV2Response(
            jobs=[job_pb2.RBACJob(full=m) for m in messages[page.start : page.end]],
            pagination=convert.pagination(page),
        )

    @rpc
    def UpdateJobQueue(
        self, request: job_pb2.UpdateJobQueueRequest, context: grpc.ServicerContext
    ) -> job_pb2.UpdateJobQueueResponse:
        principal = self.user(context)
        if len(request.updates) > MAX_UPDATES:
            raise InvalidArgument(f"updates: at most {MAX_UPDATES} per request (got {len(request.updates)})")
        edits: list[tuple[int, experiment_edits.ExperimentEdit]] = []
        for index, update in enumerate(request.updates):
            field = f"updates[{index}]"
            experiment_id = experiment_of_job(update.job_id)
            if experiment_id is None:
                raise NotFound(f"{field}.job_id: no job {update.job_id[:80]!r}")
            if update.HasField("ahead_of") or update.HasField("behind_of"):
                raise InvalidArgument(
                    f"{field}: the priority scheduler orders its queue by priority and submission time; "
                    "set a priority instead of moving a job ahead of or behind another"
                )
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
        # All or nothing: one transaction, so a refused update leaves every job as it was.
        with self.ctx.unit_of_work() as w:
            for experiment_id, edit in edits:
                exp = lifecycle.load(w, experiment_id)
                lifecycle.check_can_modify(principal, exp)
                experiment_edits.apply(self.ctx, w, exp, edit)
        return job_pb2.UpdateJobQueueResponse()

"""Unmanaged runs (Determined's Core API v2 outside the cluster): the experiment by external id,
its trials, each run's start, the states and heartbeats its code reports, and its shipped output.
Every rule is in domain/experiments/unmanaged.py; this edge converts and calls it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import grpc

from cairn.api.v1 import experiment_pb2 as epb
from cairn.api.v1 import trial_pb2 as tpb
from cairn.wire import struct_to_python
from services.common.principal import Principal
from services.master.domain.experiments import unmanaged
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.kernel.states import RunState
from services.master.domain.metrics import logs
from services.master.domain.reads import experiments as experiment_reads
from services.master.domain.reads import trials as trial_reads
from services.master.servicers.api import convert
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.errors import rpc

# What an unmanaged trial's code may report, as the trial's stored state (RUNNING is ACTIVE here).
_REPORTABLE = {
    tpb.Trial.STATE_ACTIVE: RunState.ACTIVE,
    tpb.Trial.STATE_RUNNING: RunState.ACTIVE,
    tpb.Trial.STATE_PAUSED: RunState.PAUSED,
    tpb.Trial.STATE_COMPLETED: RunState.COMPLETED,
    tpb.Trial.STATE_CANCELED: RunState.CANCELED,
    tpb.Trial.STATE_ERROR: RunState.ERROR,
}


def _reported_state(request: tpb.PatchTrialRequest) -> RunState | None:
    if not request.HasField("state"):
        return None
    state = _REPORTABLE.get(request.state)
    if state is None:
        raise InvalidArgument(
            f"state: {tpb.Trial.State.Name(request.state)} cannot be reported by a trial's code "
            "(RUNNING, PAUSED, COMPLETED, CANCELED or ERROR)"
        )
    return state


def _shipped_time(text: str) -> datetime:
    if not text:
        return datetime.now(UTC)
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidArgument(f"logs[].timestamp: not an RFC 3339 time: {text[:64]!r}") from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _shipped_rank(text: str) -> int | None:
    if not text:
        return None
    if not text.isdigit() or len(text) > 9:
        raise InvalidArgument(f"logs[].rank: not a rank: {text[:16]!r}")
    return int(text)


def create_experiment(
    ctx: MasterContext, principal: Principal, request: epb.CreateExperimentRequest, external_id: str | None
) -> tuple[epb.Experiment, dict[str, Any]]:
    """CreateExperiment with `unmanaged` (and PutExperiment): the experiment and its config."""
    if request.model_definition or request.parent_id or request.HasField("template"):
        raise InvalidArgument(
            "unmanaged: an unmanaged experiment's code runs outside the cluster; it takes no "
            "model_definition, parent_id nor template"
        )
    if request.validate_only:
        raise InvalidArgument("validate_only: an unmanaged experiment is created by its code, not validated")
    if not request.config.strip():
        raise InvalidArgument("config: required (the experiment configuration as YAML text)")
    created = unmanaged.create_experiment(
        ctx, principal, request.config, external_id=external_id, project_id=request.project_id
    )
    with ctx.db.read() as s:
        message = convert.experiment(experiment_reads.experiment_row(s, created.experiment_id))
    return message, created.config


class UnmanagedApi(ServicerBase):
    def _trial_message(self, trial_id: int) -> tpb.Trial:
        with self.ctx.db.read() as s:
            return convert.trial(trial_reads.trial_row(s, trial_id))

    @rpc
    def PutExperiment(
        self, request: epb.PutExperimentRequest, context: grpc.ServicerContext
    ) -> epb.PutExperimentResponse:
        create = request.create_experiment_request
        if not create.unmanaged:
            raise InvalidArgument(
                "create_experiment_request.unmanaged: must be true "
                "(only unmanaged experiments have external ids)"
            )
        message, config = create_experiment(
            self.ctx, self.user(context), create, request.external_experiment_id
        )
        return epb.PutExperimentResponse(experiment=message, config=convert.struct(config))

    def _create_trial(
        self, context: grpc.ServicerContext, request: tpb.CreateTrialRequest, external_id: str | None
    ) -> tpb.Trial:
        if not request.unmanaged:
            raise InvalidArgument(
                "unmanaged: must be true (only an unmanaged experiment's code creates trials)"
            )
        trial_id = unmanaged.create_trial(
            self.ctx,
            self.user(context),
            request.experiment_id,
            struct_to_python(request.hparams),
            external_id=external_id,
        )
        return self._trial_message(trial_id)

    @rpc
    def CreateTrial(
        self, request: tpb.CreateTrialRequest, context: grpc.ServicerContext
    ) -> tpb.CreateTrialResponse:
        return tpb.CreateTrialResponse(trial=self._create_trial(context, request, None))

    @rpc
    def PutTrial(self, request: tpb.PutTrialRequest, context: grpc.ServicerContext) -> tpb.PutTrialResponse:
        trial = self._create_trial(context, request.create_trial_request, request.external_trial_id)
        return tpb.PutTrialResponse(trial=trial)

    @rpc
    def PatchTrial(
        self, request: tpb.PatchTrialRequest, context: grpc.ServicerContext
    ) -> tpb.PatchTrialResponse:
        unmanaged.patch_trial(self.ctx, self.user(context), request.trial_id, _reported_state(request))
        return tpb.PatchTrialResponse(trial=self._trial_message(request.trial_id))

    @rpc
    def StartTrial(
        self, request: tpb.StartTrialRequest, context: grpc.ServicerContext
    ) -> tpb.StartTrialResponse:
        started = unmanaged.start_trial(self.ctx, self.user(context), request.trial_id, resume=request.resume)
        response = tpb.StartTrialResponse(
            trial_run_id=started.run_id, steps_completed=started.steps_completed
        )
        if started.latest_checkpoint:
            response.latest_checkpoint = started.latest_checkpoint
        return response

    @rpc
    def ShipTaskLogs(
        self, request: tpb.ShipTaskLogsRequest, context: grpc.ServicerContext
    ) -> tpb.ShipTaskLogsResponse:
        if len(request.logs) > logs.MAX_SHIPPED_LINES:
            raise InvalidArgument(
                f"logs: at most {logs.MAX_SHIPPED_LINES} lines a batch (got {len(request.logs)})"
            )
        by_task: dict[str, list[logs.ShippedLine]] = {}
        for line in request.logs:
            if len(line.log) > logs.MAX_SHIPPED_LINE_CHARS:
                raise InvalidArgument(f"logs[].log: at most {logs.MAX_SHIPPED_LINE_CHARS} characters a line")
            by_task.setdefault(line.task_id, []).append(
                logs.ShippedLine(
                    rank=_shipped_rank(line.rank), timestamp=_shipped_time(line.timestamp), message=line.log
                )
            )
        principal = self.user(context)
        trials = {task_id: unmanaged.trial_of_task(self.ctx, principal, task_id) for task_id in by_task}
        for task_id, lines in by_task.items():
            logs.store_shipped(self.ctx, task_id, trials[task_id], lines)
        return tpb.ShipTaskLogsResponse()

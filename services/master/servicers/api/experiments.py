"""Experiments: create, read, list, lifecycle actions, and search previews."""

from __future__ import annotations

import base64
from typing import Any

import grpc
import yaml
from google.protobuf import json_format

from cairn.api.v1 import common_pb2
from cairn.api.v1 import experiment_pb2 as epb
from cairn.api.v1 import trial_pb2 as tpb
from services.master.domain.experiments import creation, experiment_edits
from services.master.domain.experiments import experiments as lifecycle
from services.master.domain.experiments.input_limits import check_experiment_limits
from services.master.domain.identity import scopes
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.kernel.states import TERMINAL, AllocationState
from services.master.domain.reads import experiments as reads
from services.master.domain.reads.listings import ExperimentFilter, experiment_rows_by_id, list_experiment_ids
from services.master.domain.reads.workspaces import check_project_exists
from services.master.domain.task_kinds.model_definition import ContextFile
from services.master.domain.tasks.tensorboard_files import TensorboardFiles
from services.master.servicers.api import convert
from services.master.servicers.api import unmanaged as unmanaged_edge
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.errors import rpc

S = epb.Experiment.State
SORT_NAMES = {
    epb.GetExperimentsRequest.SORT_BY_UNSPECIFIED: "id",
    epb.GetExperimentsRequest.SORT_BY_ID: "id",
    epb.GetExperimentsRequest.SORT_BY_DESCRIPTION: "description",
    epb.GetExperimentsRequest.SORT_BY_START_TIME: "start_time",
    epb.GetExperimentsRequest.SORT_BY_END_TIME: "end_time",
    epb.GetExperimentsRequest.SORT_BY_STATE: "state",
    epb.GetExperimentsRequest.SORT_BY_NUM_TRIALS: "num_trials",
    epb.GetExperimentsRequest.SORT_BY_PROGRESS: "progress",
    epb.GetExperimentsRequest.SORT_BY_USER: "user",
    epb.GetExperimentsRequest.SORT_BY_NAME: "name",
    epb.GetExperimentsRequest.SORT_BY_FORKED_FROM: "forked_from",
    epb.GetExperimentsRequest.SORT_BY_RESOURCE_POOL: "resource_pool",
    epb.GetExperimentsRequest.SORT_BY_PROJECT_ID: "project_id",
    epb.GetExperimentsRequest.SORT_BY_CHECKPOINT_SIZE: "id",
    epb.GetExperimentsRequest.SORT_BY_CHECKPOINT_COUNT: "id",
    epb.GetExperimentsRequest.SORT_BY_SEARCHER_METRIC_VAL: "searcher_metric_val",
}
TRIAL_SORT = {
    tpb.GetExperimentTrialsRequest.SORT_BY_UNSPECIFIED: "id",
    tpb.GetExperimentTrialsRequest.SORT_BY_ID: "id",
    tpb.GetExperimentTrialsRequest.SORT_BY_START_TIME: "start_time",
    tpb.GetExperimentTrialsRequest.SORT_BY_END_TIME: "end_time",
    tpb.GetExperimentTrialsRequest.SORT_BY_STATE: "state",
    tpb.GetExperimentTrialsRequest.SORT_BY_BEST_VALIDATION_METRIC: "searcher_metric",
    tpb.GetExperimentTrialsRequest.SORT_BY_LATEST_VALIDATION_METRIC: "searcher_metric",
    tpb.GetExperimentTrialsRequest.SORT_BY_BATCHES_PROCESSED: "batches",
    tpb.GetExperimentTrialsRequest.SORT_BY_RESTARTS: "restarts",
}


def state_name(value: int) -> str:
    return S.Name(value).removeprefix("STATE_")  # type: ignore[arg-type]


class ExperimentsApi(ServicerBase):
    def _row(self, experiment_id: int) -> Any:
        with self.ctx.db.read() as s:
            return reads.experiment_row(s, experiment_id)

    def _job_summary(self, row: Any) -> epb.JobSummary:
        states = row.allocation_states
        if states.get(AllocationState.PENDING):
            positions = [
                pos
                for alloc_id, (_reason, pos) in self.deps.waiting.reasons.items()
                if alloc_id.startswith(f"{row.experiment.id}.")
            ]
            return epb.JobSummary(state=epb.JobSummary.STATE_QUEUED, jobs_ahead=min(positions, default=0))
        if states:
            return epb.JobSummary(state=epb.JobSummary.STATE_SCHEDULED, jobs_ahead=0)
        return epb.JobSummary(state=epb.JobSummary.STATE_UNSPECIFIED, jobs_ahead=0)

    @rpc
    def CreateExperiment(
        self, request: epb.CreateExperimentRequest, context: grpc.ServicerContext
    ) -> epb.CreateExperimentResponse:
        if request.unmanaged:
            message, config = unmanaged_edge.create_experiment(self.ctx, self.user(context), request, None)
            return epb.CreateExperimentResponse(experiment=message, config=convert.struct(config))
        principal = self.user(context)
        if not request.config.strip():
            raise InvalidArgument("config: required (the experiment configuration as YAML text)")
        files = [
            ContextFile(path=f.path, type=f.type, content=f.content, mtime=f.mtime, mode=f.mode)
            for f in request.model_definition
        ]
        created = creation.create(
            self.ctx,
            principal,
            creation.CreateRequest(
                config_text=request.config,
                files=files,
                activate=request.activate,
                validate_only=request.validate_only,
                parent_id=request.parent_id or None,
                template=request.template if request.HasField("template") else None,
                project_id=request.project_id,
            ),
        )
        response = epb.CreateExperimentResponse(config=convert.struct(created.config))
        if created.slots_exceeded:
            response.warnings.append(epb.LAUNCH_WARNING_CURRENT_SLOTS_EXCEEDED)
        if created.experiment_id is not None:
            response.experiment.CopyFrom(convert.experiment(self._row(created.experiment_id)))
        else:
            # Validated only: as Determined, an empty experiment (the stock client reads its fields).
            response.experiment.SetInParent()
        return response

    @rpc
    def GetExperiment(
        self, request: epb.GetExperimentRequest, context: grpc.ServicerContext
    ) -> epb.GetExperimentResponse:
        self.check_readable(
            context,
            Permission.VIEW_EXPERIMENT_METADATA,
            f"experiment {request.experiment_id}",
            lambda s: scopes.of_experiment_id(s, request.experiment_id),
        )
        return self.cache.get("GetExperiment", request, lambda: self._get_experiment(request))

    def _get_experiment(self, request: epb.GetExperimentRequest) -> epb.GetExperimentResponse:
        row = self._row(request.experiment_id)
        return epb.GetExperimentResponse(
            experiment=convert.experiment(row),
            job_summary=self._job_summary(row),
            config=convert.config_struct(row.static),
        )

    @rpc
    def GetExperiments(
        self, request: epb.GetExperimentsRequest, context: grpc.ServicerContext
    ) -> epb.GetExperimentsResponse:
        visible = self.readable(context, Permission.VIEW_EXPERIMENT_METADATA)
        return self.cache.get(
            "GetExperiments", request, lambda: self._get_experiments(request, visible), viewer=visible
        )

    def _get_experiments(
        self, request: epb.GetExperimentsRequest, visible: frozenset[int] | None
    ) -> epb.GetExperimentsResponse:
        f = ExperimentFilter(
            workspaces=visible,
            name=request.name,
            description=request.description,
            labels=tuple(request.labels),
            archived=request.archived if request.HasField("archived") else None,
            states=tuple(state_name(s) for s in request.states),
            users=tuple(request.users),
            user_ids=tuple(request.user_ids),
            project_id=request.project_id,
        )
        with_config = request.include_config
        # Read before the queries: rows built now are stored under it, never served after a change.
        version = self.ctx.data_version
        with self.ctx.db.read() as s:
            if request.project_id:
                check_project_exists(s, request.project_id)
            ids, page = list_experiment_ids(
                s,
                f,
                sort=SORT_NAMES.get(request.sort_by, "id"),
                descending=request.order_by == common_pb2.ORDER_BY_DESC,
                offset=request.offset,
                limit=request.limit,
            )
            keys = [(i, with_config) for i in ids]
            messages = self.deps.experiment_rows.get_many(keys, version)
            missing = [i for i, key in zip(ids, keys, strict=True) if key not in messages]
            ended: dict[tuple[int, bool], epb.Experiment] = {}
            for row in experiment_rows_by_id(s, missing):
                key = (row.experiment.id, with_config)
                messages[key] = convert.experiment(row, with_config=with_config)
                # A running experiment's duration moves with the clock: only ended ones are kept.
                if row.experiment.state in TERMINAL:
                    ended[key] = messages[key]
        self.deps.experiment_rows.put_many(version, ended)
        return epb.GetExperimentsResponse(
            experiments=[messages[key] for key in keys if key in messages],
            pagination=convert.pagination(page),
        )

    def _act(
        self,
        context: grpc.ServicerContext,
        experiment_id: int,
        action: Any,
        permission: Permission = Permission.UPDATE_EXPERIMENT,
    ) -> None:
        principal = self.user(context)
        with self.ctx.unit_of_work() as w:
            exp = lifecycle.load(w, experiment_id)
            lifecycle.check_can_modify(w.session, principal, exp, permission)
            action(w, exp)

    @rpc
    def PatchExperiment(
        self, request: epb.PatchExperimentRequest, context: grpc.ServicerContext
    ) -> epb.PatchExperimentResponse:
        patch = request.experiment
        edit = experiment_edits.ExperimentEdit(
            name=patch.name if patch.HasField("name") else None,
            description=patch.description if patch.HasField("description") else None,
            notes=patch.notes if patch.HasField("notes") else None,
            labels=list(json_format.MessageToDict(patch.labels)) if patch.HasField("labels") else None,
            priority=(
                patch.resources.priority
                if patch.HasField("resources") and patch.resources.HasField("priority")
                else None
            ),
            weight=patch.resources.weight
            if patch.HasField("resources") and patch.resources.HasField("weight")
            else None,
            max_slots=(
                patch.resources.max_slots
                if patch.HasField("resources") and patch.resources.HasField("max_slots")
                else None
            ),
            gc_policy=(
                {
                    "save_experiment_best": patch.checkpoint_storage.save_experiment_best,
                    "save_trial_best": patch.checkpoint_storage.save_trial_best,
                    "save_trial_latest": patch.checkpoint_storage.save_trial_latest,
                }
                if patch.HasField("checkpoint_storage")
                else None
            ),
        )
        principal = self.user(context)
        # Its resources and checkpoint policy change how it runs; the rest is its metadata.
        runs = patch.HasField("resources") or patch.HasField("checkpoint_storage")
        permission = Permission.UPDATE_EXPERIMENT if runs else Permission.UPDATE_EXPERIMENT_METADATA
        with self.ctx.unit_of_work() as w:
            exp = lifecycle.load(w, patch.id)
            lifecycle.check_can_modify(w.session, principal, exp, permission)
            experiment_edits.apply(self.ctx, w, exp, edit)
        return epb.PatchExperimentResponse(experiment=convert.experiment(self._row(patch.id)))

    @rpc
    def ActivateExperiment(
        self, request: epb.ActivateExperimentRequest, context: grpc.ServicerContext
    ) -> epb.ActivateExperimentResponse:
        self._act(context, request.id, lambda w, e: lifecycle.activate(self.ctx, w, e))
        return epb.ActivateExperimentResponse()

    @rpc
    def PauseExperiment(
        self, request: epb.PauseExperimentRequest, context: grpc.ServicerContext
    ) -> epb.PauseExperimentResponse:
        self._act(context, request.id, lambda w, e: lifecycle.pause(self.ctx, w, e))
        return epb.PauseExperimentResponse()

    @rpc
    def CancelExperiment(
        self, request: epb.CancelExperimentRequest, context: grpc.ServicerContext
    ) -> epb.CancelExperimentResponse:
        self._act(context, request.id, lambda w, e: lifecycle.cancel(self.ctx, w, e))
        return epb.CancelExperimentResponse()

    @rpc
    def KillExperiment(
        self, request: epb.KillExperimentRequest, context: grpc.ServicerContext
    ) -> epb.KillExperimentResponse:
        self._act(context, request.id, lambda w, e: lifecycle.kill(self.ctx, w, e))
        return epb.KillExperimentResponse()

    @rpc
    def ArchiveExperiment(
        self, request: epb.ArchiveExperimentRequest, context: grpc.ServicerContext
    ) -> epb.ArchiveExperimentResponse:
        self._act(
            context,
            request.id,
            lambda w, e: lifecycle.set_archived(w, e, True),
            Permission.UPDATE_EXPERIMENT_METADATA,
        )
        return epb.ArchiveExperimentResponse()

    @rpc
    def UnarchiveExperiment(
        self, request: epb.UnarchiveExperimentRequest, context: grpc.ServicerContext
    ) -> epb.UnarchiveExperimentResponse:
        self._act(
            context,
            request.id,
            lambda w, e: lifecycle.set_archived(w, e, False),
            Permission.UPDATE_EXPERIMENT_METADATA,
        )
        return epb.UnarchiveExperimentResponse()

    @rpc
    def DeleteExperiment(
        self, request: epb.DeleteExperimentRequest, context: grpc.ServicerContext
    ) -> epb.DeleteExperimentResponse:
        # DELETING owes the deletion itself (experiments.transition): the deferred-work loop runs it.
        self._act(
            context,
            request.experiment_id,
            lambda w, e: lifecycle.mark_deleting(self.ctx, w, e),
            Permission.DELETE_EXPERIMENT,
        )
        return epb.DeleteExperimentResponse()

    @rpc
    def DeleteTensorboardFiles(
        self, request: epb.DeleteTensorboardFilesRequest, context: grpc.ServicerContext
    ) -> epb.DeleteTensorboardFilesResponse:
        TensorboardFiles(self.ctx, self.deps.checkpoints).delete_for(
            self.user(context), request.experiment_id
        )
        return epb.DeleteTensorboardFilesResponse()

    @rpc
    def GetExperimentTrials(
        self, request: tpb.GetExperimentTrialsRequest, context: grpc.ServicerContext
    ) -> tpb.GetExperimentTrialsResponse:
        self.check_experiment_readable(context, request.experiment_id)
        return self.cache.get("GetExperimentTrials", request, lambda: self._get_experiment_trials(request))

    def _get_experiment_trials(
        self, request: tpb.GetExperimentTrialsRequest
    ) -> tpb.GetExperimentTrialsResponse:
        with self.ctx.db.read() as s:
            rows, page = reads.experiment_trials(
                s,
                request.experiment_id,
                states=[tpb.Trial.State.Name(x).removeprefix("STATE_") for x in request.states],
                sort=TRIAL_SORT.get(request.sort_by, "id"),
                descending=request.order_by == common_pb2.ORDER_BY_DESC,
                offset=request.offset,
                limit=request.limit,
            )
        return tpb.GetExperimentTrialsResponse(
            trials=[convert.trial(r) for r in rows], pagination=convert.pagination(page)
        )

    @rpc
    def GetModelDef(
        self, request: epb.GetModelDefRequest, context: grpc.ServicerContext
    ) -> epb.GetModelDefResponse:
        self.check_experiment_readable(context, request.experiment_id, Permission.VIEW_EXPERIMENT_ARTIFACTS)
        with self.ctx.db.read() as s:
            archive = reads.model_definition(s, request.experiment_id)
        return epb.GetModelDefResponse(b64_tgz=base64.b64encode(archive).decode())

    @rpc
    def GetExperimentLabels(
        self, request: epb.GetExperimentLabelsRequest, context: grpc.ServicerContext
    ) -> epb.GetExperimentLabelsResponse:
        visible = self.readable(context, Permission.VIEW_EXPERIMENT_METADATA)
        with self.ctx.db.read() as s:
            labels = reads.labels_in_use(s, visible)
        return epb.GetExperimentLabelsResponse(labels=labels)

    @rpc
    def PreviewHPSearch(
        self, request: epb.PreviewHPSearchRequest, context: grpc.ServicerContext
    ) -> epb.PreviewHPSearchResponse:
        self.user(context)
        if request.config_text:
            text = request.config_text
        elif request.config.fields:
            text = yaml.safe_dump(json_format.MessageToDict(request.config))
        else:
            raise InvalidArgument("config: required")
        config = creation.expanded_config(self.ctx, text)
        # A preview enumerates the trials: bounded by the same per-experiment limit as creation.
        check_experiment_limits(config, self.ctx.settings.max_trials_per_experiment)
        spec = creation.search_spec(config)
        if request.seed:
            spec.seed = request.seed
        preview = self.ctx.searchers.for_config(config).preview(spec)
        response = epb.PreviewHPSearchResponse(summary=epb.SearchSummary(config=convert.struct(config)))
        # Determined's summary: how many trials train to each final length.
        counts: dict[int, int] = {}
        for trial in preview.trials:
            key = int(trial.lengths[-1]) if trial.lengths else 0
            counts[key] = counts.get(key, 0) + 1
            response.previewed_trials.append(
                epb.PreviewedTrial(
                    request_id=trial.request_id,
                    hparams=trial.hparams,
                    lengths=trial.lengths,
                    bracket=trial.bracket,
                )
            )
        for length, count in sorted(counts.items()):
            unit = epb.SearchUnit(max_length=not length)
            if length:
                unit.name = preview.unit or "batches"
                unit.value = length
            response.summary.trials.append(epb.TrialSummary(count=count, unit=unit))
        return response

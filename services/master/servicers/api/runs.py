"""Runs (Determined's trials seen on their own) and bulk experiment actions by project: the run
table, the run actions and the experiment actions by ids or filter, each answered one result per
id, a run's metadata, and the columns a project's table offers."""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import json_format

from cairn.api.v1 import experiment_pb2 as epb
from cairn.api.v1 import run_pb2 as rpb
from cairn.api.v1 import trial_pb2 as tpb
from services.master.domain.experiments import bulk_actions, run_actions
from services.master.domain.experiments.bulk_actions import ActionResult, BulkFilters
from services.master.domain.identity import scopes
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.reads import project_columns, runs
from services.master.domain.reads.listings import best_trials, experiment_rows_by_id
from services.master.domain.trials import run_metadata
from services.master.servicers.api import convert
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.errors import rpc


def _run_results(results: list[ActionResult]) -> list[rpb.RunActionResult]:
    return [rpb.RunActionResult(id=r.id, error=r.error) for r in results]


def _experiment_results(results: list[ActionResult]) -> rpb.BulkExperimentsResponse:
    return rpb.BulkExperimentsResponse(
        results=[rpb.ExperimentActionResult(id=r.id, error=r.error) for r in results]
    )


def _filters(message: rpb.BulkExperimentFilters) -> BulkFilters:
    return BulkFilters(
        name=message.name,
        description=message.description,
        labels=tuple(message.labels),
        archived=message.archived if message.HasField("archived") else None,
        states=tuple(epb.Experiment.State.Name(s).removeprefix("STATE_") for s in message.states),
        user_ids=tuple(message.user_ids),
        project_id=message.project_id,
        excluded_ids=tuple(message.excluded_experiment_ids),
    )


def flat_run(row: runs.RunRow) -> rpb.FlatRun:
    t, e = row.trial, row.experiment
    searcher = e.config.get("searcher") or {}
    experiment = rpb.FlatRunExperiment(
        id=e.id,
        searcher_type=str(searcher.get("name") or ""),
        searcher_metric=str(searcher.get("metric") or ""),
        resource_pool=e.resource_pool,
        name=e.name,
        description=e.description,
        progress=e.progress,
        is_multitrial=row.trial_count > 1,
    )
    if e.parent_id is not None:
        experiment.forked_from = e.parent_id
    message = rpb.FlatRun(
        id=t.id,
        start_time=convert.ts(t.start_time),
        end_time=convert.ts(t.end_time),
        # The stored state: Determined's SearchRuns reads runs.state as it is and, unlike
        # GetTrial, turns no ACTIVE into QUEUED/RUNNING (domain/reads/display_states.py).
        state=tpb.Trial.State.Value(f"STATE_{t.state}"),
        labels=[str(label) for label in e.labels or []],
        checkpoint_size=row.checkpoint_size,
        checkpoint_count=row.checkpoint_count,
        hyperparameters=convert.struct(t.hparams),
        summary_metrics=convert.struct(t.summary_metrics),
        user_id=e.owner_id,
        project_id=row.project.id,
        project_name=row.project.name,
        workspace_id=row.workspace.id,
        workspace_name=row.workspace.name,
        parent_archived=row.project.archived or row.workspace.archived,
        experiment=experiment,
        archived=t.archived or e.archived,
        local_id=f"{row.project.key}-{t.id}",
    )
    if t.end_time is not None:
        message.duration = int((t.end_time - t.start_time).total_seconds())
    if t.searcher_metric_value is not None:
        message.searcher_metric_value = t.searcher_metric_value
    if t.run_metadata is not None:
        message.metadata.update(t.run_metadata)
    return message


class RunsApi(ServicerBase):
    @rpc
    def SearchRuns(
        self, request: rpb.SearchRunsRequest, context: grpc.ServicerContext
    ) -> rpb.SearchRunsResponse:
        self.user(context)
        visible = self.readable(context, Permission.VIEW_EXPERIMENT_METADATA)
        with self.ctx.db.read() as s:
            rows, page = runs.search_runs(
                s,
                visible=visible,
                project_id=convert.optional_field(request, "project_id"),
                filter_text=convert.optional_field(request, "filter"),
                sort=convert.optional_field(request, "sort"),
                offset=request.offset,
                limit=request.limit,
            )
            return rpb.SearchRunsResponse(
                runs=[flat_run(r) for r in rows], pagination=convert.pagination(page)
            )

    def _select(
        self, request: Any, project_id: int | None, context: grpc.ServicerContext
    ) -> run_actions.RunSelection:
        return run_actions.select_runs(
            self.ctx,
            visible=self.readable(context, Permission.VIEW_EXPERIMENT_METADATA),
            project_id=project_id,
            run_ids=list(request.run_ids),
            filter_text=convert.optional_field(request, "filter"),
        )

    @rpc
    def KillRuns(self, request: rpb.KillRunsRequest, context: grpc.ServicerContext) -> rpb.KillRunsResponse:
        principal = self.user(context)
        project_id = convert.optional_field(request, "project_id")
        selection = self._select(request, project_id, context)
        return rpb.KillRunsResponse(
            results=_run_results(run_actions.kill(self.ctx, principal, selection, project_id))
        )

    @rpc
    def PauseRuns(
        self, request: rpb.PauseRunsRequest, context: grpc.ServicerContext
    ) -> rpb.PauseRunsResponse:
        principal = self.user(context)
        selection = self._select(request, request.project_id, context)
        results = run_actions.pause_or_resume(self.ctx, principal, selection, request.project_id, pause=True)
        return rpb.PauseRunsResponse(results=_run_results(results))

    @rpc
    def ResumeRuns(
        self, request: rpb.ResumeRunsRequest, context: grpc.ServicerContext
    ) -> rpb.ResumeRunsResponse:
        principal = self.user(context)
        selection = self._select(request, request.project_id, context)
        results = run_actions.pause_or_resume(self.ctx, principal, selection, request.project_id, pause=False)
        return rpb.ResumeRunsResponse(results=_run_results(results))

    @rpc
    def MoveRuns(self, request: rpb.MoveRunsRequest, context: grpc.ServicerContext) -> rpb.MoveRunsResponse:
        principal = self.user(context)
        selection = self._select(request, request.source_project_id, context)
        results = run_actions.move(
            self.ctx,
            principal,
            selection,
            request.source_project_id,
            request.destination_project_id,
            skip_multitrial=request.skip_multitrial,
        )
        return rpb.MoveRunsResponse(results=_run_results(results))

    @rpc
    def ArchiveRuns(
        self, request: rpb.ArchiveRunsRequest, context: grpc.ServicerContext
    ) -> rpb.ArchiveRunsResponse:
        principal = self.user(context)
        selection = self._select(request, request.project_id, context)
        results = run_actions.set_archived(self.ctx, principal, selection, request.project_id, archived=True)
        return rpb.ArchiveRunsResponse(results=_run_results(results))

    @rpc
    def UnarchiveRuns(
        self, request: rpb.UnarchiveRunsRequest, context: grpc.ServicerContext
    ) -> rpb.UnarchiveRunsResponse:
        principal = self.user(context)
        selection = self._select(request, request.project_id, context)
        results = run_actions.set_archived(self.ctx, principal, selection, request.project_id, archived=False)
        return rpb.UnarchiveRunsResponse(results=_run_results(results))

    @rpc
    def DeleteRuns(
        self, request: rpb.DeleteRunsRequest, context: grpc.ServicerContext
    ) -> rpb.DeleteRunsResponse:
        principal = self.user(context)
        project_id = convert.optional_field(request, "project_id")
        selection = self._select(request, project_id, context)
        return rpb.DeleteRunsResponse(
            results=_run_results(run_actions.delete(self.ctx, principal, selection, project_id))
        )

    @rpc
    def GetRunMetadata(
        self, request: rpb.GetRunMetadataRequest, context: grpc.ServicerContext
    ) -> rpb.GetRunMetadataResponse:
        metadata = run_metadata.get_metadata(self.ctx, self.caller(context), request.run_id)
        response = rpb.GetRunMetadataResponse()
        if metadata is not None:
            response.metadata.update(metadata)
        return response

    @rpc
    def PostRunMetadata(
        self, request: rpb.PostRunMetadataRequest, context: grpc.ServicerContext
    ) -> rpb.PostRunMetadataResponse:
        if not request.HasField("metadata"):
            raise InvalidArgument("metadata: required (a JSON object)")
        stored = run_metadata.set_metadata(
            self.ctx, self.caller(context), request.run_id, json_format.MessageToDict(request.metadata)
        )
        response = rpb.PostRunMetadataResponse()
        response.metadata.update(stored)
        return response

    def _bulk(self, action: str, request: rpb.BulkExperimentsRequest, context: grpc.ServicerContext) -> Any:
        principal = self.user(context)
        ids = self._experiment_ids(action, request, context)
        return _experiment_results(bulk_actions.act(self.ctx, principal, action, request.project_id, ids))

    def _experiment_ids(self, action: str, request: Any, context: grpc.ServicerContext) -> list[int]:
        if request.HasField("filters"):
            visible = self.readable(context, Permission.VIEW_EXPERIMENT_METADATA)
            return bulk_actions.select_by_filters(
                self.ctx, request.project_id, _filters(request.filters), action, visible
            )
        return bulk_actions.check_ids(list(request.experiment_ids), "experimentIds")

    @rpc
    def KillExperiments(self, request: rpb.BulkExperimentsRequest, context: grpc.ServicerContext) -> Any:
        return self._bulk("kill", request, context)

    @rpc
    def PauseExperiments(self, request: rpb.BulkExperimentsRequest, context: grpc.ServicerContext) -> Any:
        return self._bulk("pause", request, context)

    @rpc
    def ActivateExperiments(self, request: rpb.BulkExperimentsRequest, context: grpc.ServicerContext) -> Any:
        return self._bulk("activate", request, context)

    @rpc
    def CancelExperiments(self, request: rpb.BulkExperimentsRequest, context: grpc.ServicerContext) -> Any:
        return self._bulk("cancel", request, context)

    @rpc
    def ArchiveExperiments(self, request: rpb.BulkExperimentsRequest, context: grpc.ServicerContext) -> Any:
        return self._bulk("archive", request, context)

    @rpc
    def UnarchiveExperiments(self, request: rpb.BulkExperimentsRequest, context: grpc.ServicerContext) -> Any:
        return self._bulk("unarchive", request, context)

    @rpc
    def DeleteExperiments(self, request: rpb.BulkExperimentsRequest, context: grpc.ServicerContext) -> Any:
        return self._bulk("delete", request, context)

    @rpc
    def MoveExperiments(
        self, request: rpb.MoveExperimentsRequest, context: grpc.ServicerContext
    ) -> rpb.BulkExperimentsResponse:
        principal = self.user(context)
        ids = self._experiment_ids("move", request, context)
        results = bulk_actions.move(
            self.ctx, principal, request.project_id, ids, request.destination_project_id
        )
        return _experiment_results(results)

    @rpc
    def SearchExperiments(
        self, request: rpb.SearchExperimentsRequest, context: grpc.ServicerContext
    ) -> rpb.SearchExperimentsResponse:
        self.user(context)
        visible = self.readable(context, Permission.VIEW_EXPERIMENT_METADATA)
        with self.ctx.db.read() as s:
            ids, page = runs.search_experiment_ids(
                s,
                visible=visible,
                project_id=convert.optional_field(request, "project_id"),
                filter_text=convert.optional_field(request, "filter"),
                sort=convert.optional_field(request, "sort"),
                offset=request.offset,
                limit=request.limit,
            )
            rows = experiment_rows_by_id(s, ids)
            best = best_trials(s, [row.trials.best_trial_id for row in rows])
        answers = []
        for row in rows:
            answer = rpb.SearchExperimentExperiment(experiment=convert.experiment(row))
            best_trial = best.get(row.trials.best_trial_id or 0)
            if best_trial is not None:
                answer.best_trial.CopyFrom(convert.trial(best_trial))
            answers.append(answer)
        return rpb.SearchExperimentsResponse(experiments=answers, pagination=convert.pagination(page))

    @rpc
    def GetProjectColumns(
        self, request: rpb.GetProjectColumnsRequest, context: grpc.ServicerContext
    ) -> rpb.GetProjectColumnsResponse:
        self.user(context)
        project_id = request.id
        self.check_readable(
            context,
            Permission.VIEW_PROJECT,
            f"project {project_id}",
            lambda s: scopes.of_project_id(s, project_id),
        )
        with self.ctx.db.read() as s:
            columns = project_columns.project_columns(
                s, request.id, runs=request.table_type == rpb.TABLE_TYPE_RUN
            )
        response = rpb.GetProjectColumnsResponse()
        for c in columns:
            column = response.columns.add(
                column=c.column,
                location=rpb.LocationType.Value(f"LOCATION_TYPE_{c.location}"),
                type=rpb.ColumnType.Value(f"COLUMN_TYPE_{c.type}"),
            )
            if c.display_name is not None:
                column.display_name = c.display_name
        return response

"""Workspaces and projects: Determined's `det workspace ...`, `det project ...`, the SDK's
workspace and project calls, and `det experiment move`."""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import struct_pb2

from cairn.api.v1 import common_pb2
from cairn.api.v1 import workspace_pb2 as wpb
from services.master.domain.deletion import workspace_deletion
from services.master.domain.experiments import experiment_projects
from services.master.domain.identity import agent_users, scopes
from services.master.domain.identity.permissions import Permission
from services.master.domain.reads import workspaces as reads
from services.master.domain.workspaces import workspaces
from services.master.servicers.api import convert
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.api.templates import plain
from services.master.servicers.errors import rpc

WORKSPACE_SORT = {
    wpb.GetWorkspacesRequest.SORT_BY_UNSPECIFIED: "id",
    wpb.GetWorkspacesRequest.SORT_BY_ID: "id",
    wpb.GetWorkspacesRequest.SORT_BY_NAME: "name",
}
PROJECT_SORT = {
    wpb.GetWorkspaceProjectsRequest.SORT_BY_UNSPECIFIED: "id",
    wpb.GetWorkspaceProjectsRequest.SORT_BY_ID: "id",
    wpb.GetWorkspaceProjectsRequest.SORT_BY_CREATION_TIME: "created_at",
    wpb.GetWorkspaceProjectsRequest.SORT_BY_LAST_EXPERIMENT_START_TIME: "last_experiment_started_at",
    wpb.GetWorkspaceProjectsRequest.SORT_BY_NAME: "name",
    wpb.GetWorkspaceProjectsRequest.SORT_BY_DESCRIPTION: "description",
}


def _state(state: str) -> wpb.WorkspaceState.ValueType:
    return wpb.WorkspaceState.Value(f"WORKSPACE_STATE_{state}") if state else wpb.WORKSPACE_STATE_UNSPECIFIED


def workspace_message(row: reads.WorkspaceRow) -> wpb.Workspace:
    w = row.workspace
    message = wpb.Workspace(
        id=w.id,
        name=w.name,
        archived=w.archived,
        username=row.username,
        immutable=w.immutable,
        num_projects=row.num_projects,
        pinned=False,
        user_id=w.user_id or 0,
        num_experiments=row.num_experiments,
        state=_state(w.state),
        error_message=row.error_message,
    )
    if w.checkpoint_storage:
        message.checkpoint_storage_config.CopyFrom(convert.struct(w.checkpoint_storage))
    if w.default_compute_pool:
        message.default_compute_pool = w.default_compute_pool
    if w.default_aux_pool:
        message.default_aux_pool = w.default_aux_pool
    link = convert.agent_user_group(agent_users.of_row(w))
    if link is not None:
        message.agent_user_group.CopyFrom(link)
    return message


def project_message(row: reads.ProjectRow) -> wpb.Project:
    p = row.project
    message = wpb.Project(
        id=p.id,
        name=p.name,
        workspace_id=p.workspace_id,
        description=p.description,
        notes=[
            wpb.Note(name=str(n.get("name", "")), contents=str(n.get("contents", ""))) for n in p.notes or []
        ],
        num_experiments=row.num_experiments,
        num_active_experiments=row.num_active_experiments,
        archived=row.archived,
        username=row.username,
        immutable=p.immutable,
        user_id=p.user_id or 0,
        workspace_name=row.workspace_name,
        state=_state(p.state),
        error_message=row.error_message,
        num_runs=row.num_runs,
        key=p.key,
    )
    started = convert.ts(row.last_experiment_started_at)
    if started is not None:
        message.last_experiment_started_at.CopyFrom(started)
    return message


def _struct_given(message: Any, field: str) -> dict[str, Any] | None:
    """A Struct field of a request as JSON data (None when it was not sent)."""
    if not message.HasField(field):
        return None
    value = struct_pb2.Value()
    value.struct_value.CopyFrom(getattr(message, field))
    result: dict[str, Any] = plain(value)
    return result


class WorkspacesApi(ServicerBase):
    def _workspace(self, workspace_id: int) -> wpb.Workspace:
        with self.ctx.db.read() as s:
            return workspace_message(reads.workspace_row(s, workspace_id))

    def _project(self, project_id: int) -> wpb.Project:
        with self.ctx.db.read() as s:
            return project_message(reads.project_row(s, project_id))

    # ---- workspaces ----

    @rpc
    def GetWorkspaces(
        self, request: wpb.GetWorkspacesRequest, context: grpc.ServicerContext
    ) -> wpb.GetWorkspacesResponse:
        self.user(context)
        visible = self.readable(context, Permission.VIEW_WORKSPACE)
        return self.cache.get(
            "GetWorkspaces", request, lambda: self._get_workspaces(request, visible), viewer=visible
        )

    def _get_workspaces(
        self, request: wpb.GetWorkspacesRequest, visible: frozenset[int] | None
    ) -> wpb.GetWorkspacesResponse:
        if request.HasField("pinned") and request.pinned:
            # Cairn keeps no pins: nothing is pinned.
            return wpb.GetWorkspacesResponse(pagination=common_pb2.Pagination(offset=request.offset))
        f = reads.WorkspaceFilter(
            name=request.name,
            name_case_sensitive=request.name_case_sensitive,
            archived=request.archived if request.HasField("archived") else None,
            users=tuple(request.users),
            user_ids=tuple(request.user_ids),
            visible=visible,
        )
        with self.ctx.db.read() as s:
            rows, page = reads.list_workspaces(
                s,
                f,
                sort=WORKSPACE_SORT.get(request.sort_by, "id"),
                descending=request.order_by == common_pb2.ORDER_BY_DESC,
                offset=request.offset,
                limit=request.limit,
            )
        return wpb.GetWorkspacesResponse(
            workspaces=[workspace_message(r) for r in rows], pagination=convert.pagination(page)
        )

    @rpc
    def GetWorkspace(
        self, request: wpb.GetWorkspaceRequest, context: grpc.ServicerContext
    ) -> wpb.GetWorkspaceResponse:
        self.user(context)
        self.check_readable(
            context, Permission.VIEW_WORKSPACE, f"workspace {request.id}", lambda s: request.id
        )
        return self.cache.get(
            "GetWorkspace", request, lambda: wpb.GetWorkspaceResponse(workspace=self._workspace(request.id))
        )

    @rpc
    def PostWorkspace(
        self, request: wpb.PostWorkspaceRequest, context: grpc.ServicerContext
    ) -> wpb.PostWorkspaceResponse:
        principal = self.user(context)
        settings = workspaces.WorkspaceSettings(
            checkpoint_storage=_struct_given(request, "checkpoint_storage_config"),
            default_compute_pool=convert.optional_field(request, "default_compute_pool"),
            default_aux_pool=convert.optional_field(request, "default_aux_pool"),
            agent_user_group=convert.agent_user_group_request(request),
            kubernetes_namespaces=bool(request.cluster_namespace_meta.fields or request.cluster_quota_pairs),
        )
        with self.ctx.unit_of_work() as w:
            workspace_id = workspaces.create_workspace(self.ctx, w, principal, request.name, settings)
        return wpb.PostWorkspaceResponse(workspace=self._workspace(workspace_id))

    @rpc
    def PatchWorkspace(
        self, request: wpb.PatchWorkspaceRequest, context: grpc.ServicerContext
    ) -> wpb.PatchWorkspaceResponse:
        principal = self.user(context)
        patch = request.workspace
        compute = convert.optional_field(patch, "default_compute_resource_pool")
        aux = convert.optional_field(patch, "default_aux_resource_pool")
        settings = workspaces.WorkspaceSettings(
            checkpoint_storage=_struct_given(patch, "checkpoint_storage_config"),
            default_compute_pool=compute
            if compute is not None
            else convert.optional_field(patch, "default_compute_pool"),
            default_aux_pool=aux if aux is not None else convert.optional_field(patch, "default_aux_pool"),
            agent_user_group=convert.agent_user_group_request(patch),
            kubernetes_namespaces=bool(patch.cluster_namespace_meta.fields),
        )
        with self.ctx.unit_of_work() as w:
            workspaces.patch_workspace(
                self.ctx, w, principal, request.id, convert.optional_field(patch, "name"), settings
            )
        return wpb.PatchWorkspaceResponse(workspace=self._workspace(request.id))

    @rpc
    def ArchiveWorkspace(
        self, request: wpb.ArchiveWorkspaceRequest, context: grpc.ServicerContext
    ) -> wpb.ArchiveWorkspaceResponse:
        principal = self.user(context)
        with self.ctx.unit_of_work() as w:
            workspaces.set_workspace_archived(w, principal, request.id, True)
        return wpb.ArchiveWorkspaceResponse()

    @rpc
    def UnarchiveWorkspace(
        self, request: wpb.UnarchiveWorkspaceRequest, context: grpc.ServicerContext
    ) -> wpb.UnarchiveWorkspaceResponse:
        principal = self.user(context)
        with self.ctx.unit_of_work() as w:
            workspaces.set_workspace_archived(w, principal, request.id, False)
        return wpb.UnarchiveWorkspaceResponse()

    @rpc
    def DeleteWorkspace(
        self, request: wpb.DeleteWorkspaceRequest, context: grpc.ServicerContext
    ) -> wpb.DeleteWorkspaceResponse:
        completed = workspace_deletion.delete_workspace(self.ctx, self.user(context), request.id)
        return wpb.DeleteWorkspaceResponse(completed=completed)

    @rpc
    def GetWorkspaceProjects(
        self, request: wpb.GetWorkspaceProjectsRequest, context: grpc.ServicerContext
    ) -> wpb.GetWorkspaceProjectsResponse:
        self.user(context)
        visible = self.readable(context, Permission.VIEW_PROJECT)
        return self.cache.get(
            "GetWorkspaceProjects", request, lambda: self._get_projects(request, visible), viewer=visible
        )

    def _get_projects(
        self, request: wpb.GetWorkspaceProjectsRequest, visible: frozenset[int] | None
    ) -> wpb.GetWorkspaceProjectsResponse:
        f = reads.ProjectFilter(
            visible=visible,
            workspace_id=request.id,
            name=request.name,
            archived=request.archived if request.HasField("archived") else None,
            users=tuple(request.users),
            user_ids=tuple(request.user_ids),
        )
        with self.ctx.db.read() as s:
            rows, page = reads.list_projects(
                s,
                f,
                sort=PROJECT_SORT.get(request.sort_by, "id"),
                descending=request.order_by == common_pb2.ORDER_BY_DESC,
                offset=request.offset,
                limit=request.limit,
            )
        return wpb.GetWorkspaceProjectsResponse(
            projects=[project_message(r) for r in rows], pagination=convert.pagination(page)
        )

    # ---- projects ----

    @rpc
    def PostProject(
        self, request: wpb.PostProjectRequest, context: grpc.ServicerContext
    ) -> wpb.PostProjectResponse:
        principal = self.user(context)
        with self.ctx.unit_of_work() as w:
            project_id = workspaces.create_project(
                w,
                principal,
                request.workspace_id,
                request.name,
                convert.optional_field(request, "description"),
                convert.optional_field(request, "key"),
            )
        return wpb.PostProjectResponse(project=self._project(project_id))

    @rpc
    def GetProject(
        self, request: wpb.GetProjectRequest, context: grpc.ServicerContext
    ) -> wpb.GetProjectResponse:
        self.user(context)
        self.check_readable(
            context,
            Permission.VIEW_PROJECT,
            f"project {request.id}",
            lambda s: scopes.of_project_id(s, request.id),
        )
        return self.cache.get(
            "GetProject", request, lambda: wpb.GetProjectResponse(project=self._project(request.id))
        )

    @rpc
    def PatchProject(
        self, request: wpb.PatchProjectRequest, context: grpc.ServicerContext
    ) -> wpb.PatchProjectResponse:
        principal = self.user(context)
        patch = request.project
        edit = workspaces.ProjectEdit(
            name=convert.optional_field(patch, "name"),
            description=convert.optional_field(patch, "description"),
            key=convert.optional_field(patch, "key"),
        )
        with self.ctx.unit_of_work() as w:
            workspaces.patch_project(w, principal, request.id, edit)
        return wpb.PatchProjectResponse(project=self._project(request.id))

    @rpc
    def ArchiveProject(
        self, request: wpb.ArchiveProjectRequest, context: grpc.ServicerContext
    ) -> wpb.ArchiveProjectResponse:
        principal = self.user(context)
        with self.ctx.unit_of_work() as w:
            workspaces.set_project_archived(w, principal, request.id, True)
        return wpb.ArchiveProjectResponse()

    @rpc
    def UnarchiveProject(
        self, request: wpb.UnarchiveProjectRequest, context: grpc.ServicerContext
    ) -> wpb.UnarchiveProjectResponse:
        principal = self.user(context)
        with self.ctx.unit_of_work() as w:
            workspaces.set_project_archived(w, principal, request.id, False)
        return wpb.UnarchiveProjectResponse()

    @rpc
    def DeleteProject(
        self, request: wpb.DeleteProjectRequest, context: grpc.ServicerContext
    ) -> wpb.DeleteProjectResponse:
        completed = workspace_deletion.delete_project(self.ctx, self.user(context), request.id)
        return wpb.DeleteProjectResponse(completed=completed)

    @rpc
    def PutProjectNotes(
        self, request: wpb.PutProjectNotesRequest, context: grpc.ServicerContext
    ) -> wpb.PutProjectNotesResponse:
        principal = self.user(context)
        notes = [(n.name, n.contents) for n in request.notes]
        with self.ctx.unit_of_work() as w:
            stored = workspaces.put_project_notes(w, principal, request.project_id, notes)
        return wpb.PutProjectNotesResponse(
            notes=[wpb.Note(name=n["name"], contents=n["contents"]) for n in stored]
        )

    @rpc
    def AddProjectNote(
        self, request: wpb.AddProjectNoteRequest, context: grpc.ServicerContext
    ) -> wpb.AddProjectNoteResponse:
        principal = self.user(context)
        with self.ctx.unit_of_work() as w:
            stored = workspaces.add_project_note(
                w, principal, request.project_id, request.note.name, request.note.contents
            )
        return wpb.AddProjectNoteResponse(
            notes=[wpb.Note(name=n["name"], contents=n["contents"]) for n in stored]
        )

    @rpc
    def MoveExperiment(
        self, request: wpb.MoveExperimentRequest, context: grpc.ServicerContext
    ) -> wpb.MoveExperimentResponse:
        principal = self.user(context)
        with self.ctx.unit_of_work() as w:
            experiment_projects.move_experiment(
                self.ctx, w, principal, request.experiment_id, request.destination_project_id
            )
        return wpb.MoveExperimentResponse()

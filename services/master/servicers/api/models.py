"""The model registry: models and their versions (Determined's /api/v1/models routes)."""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import struct_pb2
from sqlalchemy.orm import Session

from cairn.api.v1 import common_pb2
from cairn.api.v1 import model_pb2 as mpb
from cairn.wire import struct_to_python, value_to_python
from services.master.domain.checkpoints import model_registry as registry
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.errors import NotFound
from services.master.domain.reads import models as reads
from services.master.servicers.api import convert
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.api.checkpoints import checkpoint_message
from services.master.servicers.errors import rpc

MODEL_SORT = {
    mpb.GetModelsRequest.SORT_BY_UNSPECIFIED: "id",
    mpb.GetModelsRequest.SORT_BY_NAME: "name",
    mpb.GetModelsRequest.SORT_BY_DESCRIPTION: "description",
    mpb.GetModelsRequest.SORT_BY_CREATION_TIME: "creation_time",
    mpb.GetModelsRequest.SORT_BY_LAST_UPDATED_TIME: "last_updated_time",
    mpb.GetModelsRequest.SORT_BY_NUM_VERSIONS: "num_versions",
    mpb.GetModelsRequest.SORT_BY_WORKSPACE: "workspace",
}


def model_message(row: reads.ModelRow) -> mpb.Model:
    m = row.model
    return mpb.Model(
        id=m.id,
        name=m.name,
        description=m.description,
        metadata=convert.struct(m.metadata_),
        creation_time=convert.ts(m.creation_time),
        last_updated_time=convert.ts(m.last_updated_time),
        num_versions=row.num_versions,
        labels=list(m.labels or []),
        username=row.username,
        user_id=m.user_id,
        workspace_id=m.workspace_id,
        archived=m.archived,
        notes=m.notes,
    )


def version_message(row: reads.VersionRow) -> mpb.ModelVersion:
    v = row.version
    return mpb.ModelVersion(
        id=v.id,
        model=model_message(row.model),
        checkpoint=checkpoint_message(row.checkpoint),
        version=v.version,
        name=v.name,
        comment=v.comment,
        notes=v.notes,
        metadata=convert.struct(v.metadata_),
        labels=list(v.labels or []),
        creation_time=convert.ts(v.creation_time),
        last_updated_time=convert.ts(v.last_updated_time),
        username=row.username,
        user_id=v.user_id,
    )


def _metadata(message: Any) -> dict[str, Any] | None:
    return struct_to_python(message.metadata) if message.HasField("metadata") else None


def _labels(message: Any) -> list[Any] | None:
    """A ListValue of labels; None when not given (an empty list clears them)."""
    if not message.HasField("labels"):
        return None
    values: struct_pb2.ListValue = message.labels
    return [value_to_python(value) for value in values.values]


class ModelsApi(ServicerBase):
    def _model(self, identifier: str) -> mpb.Model:
        with self.ctx.db.read() as s:
            return model_message(reads.model(s, identifier))

    def _version(self, identifier: str, number: int) -> mpb.ModelVersion:
        with self.ctx.db.read() as s:
            return version_message(reads.version(s, identifier, number))

    @rpc
    def GetModels(
        self, request: mpb.GetModelsRequest, context: grpc.ServicerContext
    ) -> mpb.GetModelsResponse:
        query = reads.ModelQuery(
            sort_by=MODEL_SORT.get(request.sort_by, "id"),
            descending=request.order_by == common_pb2.ORDER_BY_DESC,
            offset=request.offset,
            limit=request.limit,
            name=request.name,
            description=request.description,
            labels=list(request.labels),
            archived=convert.optional_field(request, "archived"),
            users=list(request.users),
            user_ids=list(request.user_ids),
            workspace_ids=list(request.workspace_ids),
            workspace_names=list(request.workspace_names),
            model_id=request.id,
            visible=self.readable(context, Permission.VIEW_MODEL_REGISTRY),
        )
        with self.ctx.db.read() as s:
            rows, page = reads.models_page(s, query)
        return mpb.GetModelsResponse(
            models=[model_message(r) for r in rows], pagination=convert.pagination(page)
        )

    @rpc
    def GetModel(self, request: mpb.GetModelRequest, context: grpc.ServicerContext) -> mpb.GetModelResponse:
        self._check_model_readable(context, request.model_name)
        return mpb.GetModelResponse(model=self._model(request.model_name))

    def _check_model_readable(self, context: grpc.ServicerContext, identifier: str) -> None:
        def workspace_of(s: Session) -> int | None:
            try:
                return reads.model(s, identifier).model.workspace_id
            except NotFound:
                return None

        self.check_readable(context, Permission.VIEW_MODEL_REGISTRY, f"model {identifier!r}", workspace_of)

    @rpc
    def PostModel(
        self, request: mpb.PostModelRequest, context: grpc.ServicerContext
    ) -> mpb.PostModelResponse:
        principal = self.user(context)
        new = registry.NewModel(
            name=request.name,
            description=request.description,
            metadata=_metadata(request),
            labels=list(request.labels),
            notes=request.notes,
            workspace_id=convert.optional_field(request, "workspace_id"),
            workspace_name=convert.optional_field(request, "workspace_name"),
        )
        with self.ctx.unit_of_work() as w:
            model_id = registry.create_model(self.ctx, w, principal, new)
        return mpb.PostModelResponse(model=self._model(str(model_id)))

    @rpc
    def PatchModel(
        self, request: mpb.PatchModelRequest, context: grpc.ServicerContext
    ) -> mpb.PatchModelResponse:
        principal = self.user(context)
        patch = request.model
        edit = registry.ModelEdit(
            name=convert.optional_field(patch, "name"),
            description=convert.optional_field(patch, "description"),
            notes=convert.optional_field(patch, "notes"),
            metadata=_metadata(patch),
            labels=_labels(patch),
            workspace_id=convert.optional_field(patch, "workspace_id"),
            workspace_name=convert.optional_field(patch, "workspace_name"),
        )
        with self.ctx.unit_of_work() as w:
            model_id = registry.patch_model(self.ctx, w, principal, request.model_name, edit)
        return mpb.PatchModelResponse(model=self._model(str(model_id)))

    @rpc
    def ArchiveModel(
        self, request: mpb.ArchiveModelRequest, context: grpc.ServicerContext
    ) -> mpb.ArchiveModelResponse:
        principal = self.user(context)
        with self.ctx.unit_of_work() as w:
            registry.set_archived(self.ctx, w, principal, request.model_name, True)
        return mpb.ArchiveModelResponse()

    @rpc
    def UnarchiveModel(
        self, request: mpb.UnarchiveModelRequest, context: grpc.ServicerContext
    ) -> mpb.UnarchiveModelResponse:
        principal = self.user(context)
        with self.ctx.unit_of_work() as w:
            registry.set_archived(self.ctx, w, principal, request.model_name, False)
        return mpb.UnarchiveModelResponse()

    @rpc
    def DeleteModel(
        self, request: mpb.DeleteModelRequest, context: grpc.ServicerContext
    ) -> mpb.DeleteModelResponse:
        principal = self.user(context)
        with self.ctx.unit_of_work() as w:
            registry.delete_model(self.ctx, w, principal, request.model_name)
        return mpb.DeleteModelResponse()

    @rpc
    def GetModelVersions(
        self, request: mpb.GetModelVersionsRequest, context: grpc.ServicerContext
    ) -> mpb.GetModelVersionsResponse:
        self._check_model_readable(context, request.model_name)
        with self.ctx.db.read() as s:
            owner, rows, page = reads.versions_page(
                s,
                request.model_name,
                by_creation_time=request.sort_by == mpb.GetModelVersionsRequest.SORT_BY_CREATION_TIME,
                descending=request.order_by == common_pb2.ORDER_BY_DESC,
                offset=request.offset,
                limit=request.limit,
            )
            return mpb.GetModelVersionsResponse(
                model=model_message(owner),
                model_versions=[version_message(r) for r in rows],
                pagination=convert.pagination(page),
            )

    @rpc
    def GetModelVersion(
        self, request: mpb.GetModelVersionRequest, context: grpc.ServicerContext
    ) -> mpb.GetModelVersionResponse:
        self._check_model_readable(context, request.model_name)
        return mpb.GetModelVersionResponse(
            model_version=self._version(request.model_name, request.model_version_num)
        )

    @rpc
    def PostModelVersion(
        self, request: mpb.PostModelVersionRequest, context: grpc.ServicerContext
    ) -> mpb.PostModelVersionResponse:
        principal = self.user(context)
        new = registry.NewVersion(
            checkpoint_uuid=request.checkpoint_uuid,
            name=request.name,
            comment=request.comment,
            metadata=_metadata(request),
            labels=list(request.labels),
            notes=request.notes,
        )
        model_id, number = registry.register_version(self.ctx, principal, request.model_name, new)
        return mpb.PostModelVersionResponse(model_version=self._version(str(model_id), number))

    @rpc
    def PatchModelVersion(
        self, request: mpb.PatchModelVersionRequest, context: grpc.ServicerContext
    ) -> mpb.PatchModelVersionResponse:
        principal = self.user(context)
        patch = request.model_version
        edit = registry.VersionEdit(
            name=convert.optional_field(patch, "name"),
            comment=convert.optional_field(patch, "comment"),
            notes=convert.optional_field(patch, "notes"),
            metadata=_metadata(patch),
            labels=_labels(patch),
        )
        number = request.model_version_num
        with self.ctx.unit_of_work() as w:
            model_id = registry.patch_version(self.ctx, w, principal, request.model_name, number, edit)
        return mpb.PatchModelVersionResponse(model_version=self._version(str(model_id), number))

    @rpc
    def DeleteModelVersion(
        self, request: mpb.DeleteModelVersionRequest, context: grpc.ServicerContext
    ) -> mpb.DeleteModelVersionResponse:
        principal = self.user(context)
        with self.ctx.unit_of_work() as w:
            registry.delete_version(self.ctx, w, principal, request.model_name, request.model_version_num)
        return mpb.DeleteModelVersionResponse()

    @rpc
    def GetModelLabels(
        self, request: mpb.GetModelLabelsRequest, context: grpc.ServicerContext
    ) -> mpb.GetModelLabelsResponse:
        visible = self.readable(context, Permission.VIEW_MODEL_REGISTRY)
        with self.ctx.db.read() as s:
            labels = reads.labels(s, convert.optional_field(request, "workspace_id"), visible)
        return mpb.GetModelLabelsResponse(labels=labels)

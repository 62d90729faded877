"""Config templates: Determined's templates API (`det template ...`)."""

from __future__ import annotations

import math
from typing import Any

import grpc
from google.protobuf import struct_pb2

from cairn.api.v1 import common_pb2
from cairn.api.v1 import template_pb2 as tpb
from services.master.domain.experiments import templates
from services.master.domain.identity import access
from services.master.domain.identity.permissions import Permission
from services.master.domain.reads import templates as reads
from services.master.servicers.api import convert
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.errors import rpc
from services.master.store import models

# Beyond this a double no longer holds every integer: such a number stays a float.
_LARGEST_EXACT_INTEGER = 2**53


def plain(value: struct_pb2.Value) -> Any:
    """A Value as JSON data, whole numbers as ints: JSON has one number type and protobuf carries it
    as a double, but a config's `max_restarts: 3` must stay an integer (as Determined's typed config
    reads it)."""
    kind = value.WhichOneof("kind")
    if kind == "number_value":
        number = value.number_value
        if math.isfinite(number) and number.is_integer() and abs(number) < _LARGEST_EXACT_INTEGER:
            return int(number)
        return number
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "struct_value":
        return {key: plain(item) for key, item in value.struct_value.fields.items()}
    if kind == "list_value":
        return [plain(item) for item in value.list_value.values]
    return None


def template_message(row: reads.TemplateRow) -> tpb.Template:
    config = struct_pb2.Value()
    config.struct_value.CopyFrom(convert.struct(row.config))
    return tpb.Template(name=row.name, config=config, workspace_id=row.workspace_id)


def _stored(template: models.Template) -> tpb.Template:
    return template_message(reads.template_row(template))


def _given(message: Any, field: str) -> Any:
    """The config field of a request as JSON data (None when it was not sent)."""
    return plain(getattr(message, field)) if message.HasField(field) else None


class TemplatesApi(ServicerBase):
    @rpc
    def GetTemplates(
        self, request: tpb.GetTemplatesRequest, context: grpc.ServicerContext
    ) -> tpb.GetTemplatesResponse:
        self.user(context)
        wanted = reads.TemplateFilter(
            name_contains=request.name,
            workspace_ids=tuple(request.workspace_ids),
            descending=request.order_by == common_pb2.ORDER_BY_DESC,
            offset=request.offset,
            limit=request.limit,
            visible=self.readable(context, Permission.VIEW_TEMPLATES),
        )
        with self.ctx.db.read() as s:
            rows, page = reads.templates(s, wanted)
        return tpb.GetTemplatesResponse(
            templates=[template_message(row) for row in rows], pagination=convert.pagination(page)
        )

    @rpc
    def GetTemplate(
        self, request: tpb.GetTemplateRequest, context: grpc.ServicerContext
    ) -> tpb.GetTemplateResponse:
        principal = self.user(context)
        with self.ctx.db.read() as s:
            row = reads.template(s, request.template_name)
            what = f"template: template {request.template_name!r}"
            access.check_readable(principal, Permission.VIEW_TEMPLATES, row.workspace_id, what, s)
        return tpb.GetTemplateResponse(template=template_message(row))

    @rpc
    def PostTemplate(
        self, request: tpb.PostTemplateRequest, context: grpc.ServicerContext
    ) -> tpb.PostTemplateResponse:
        principal = self.user(context)
        given = request.template
        with self.ctx.unit_of_work() as w:
            created = templates.create(
                self.ctx, w, principal, given.name, _given(given, "config"), given.workspace_id
            )
            message = _stored(created)
        return tpb.PostTemplateResponse(template=message)

    @rpc
    def PutTemplate(
        self, request: tpb.PutTemplateRequest, context: grpc.ServicerContext
    ) -> tpb.PutTemplateResponse:
        principal = self.user(context)
        given = request.template
        with self.ctx.unit_of_work() as w:
            stored = templates.put(
                self.ctx, w, principal, given.name, _given(given, "config"), given.workspace_id
            )
            message = _stored(stored)
        return tpb.PutTemplateResponse(template=message)

    @rpc
    def PatchTemplateConfig(
        self, request: tpb.PatchTemplateConfigRequest, context: grpc.ServicerContext
    ) -> tpb.PatchTemplateConfigResponse:
        principal = self.user(context)
        with self.ctx.unit_of_work() as w:
            stored = templates.replace_config(
                self.ctx, w, principal, request.template_name, _given(request, "config")
            )
            message = _stored(stored)
        return tpb.PatchTemplateConfigResponse(template=message)

    @rpc
    def PatchTemplateName(
        self, request: tpb.PatchTemplateNameRequest, context: grpc.ServicerContext
    ) -> tpb.PatchTemplateNameResponse:
        principal = self.user(context)
        with self.ctx.unit_of_work() as w:
            renamed = templates.rename(self.ctx, w, principal, request.old_name, request.new_name)
            message = _stored(renamed)
        return tpb.PatchTemplateNameResponse(template=message)

    @rpc
    def DeleteTemplate(
        self, request: tpb.DeleteTemplateRequest, context: grpc.ServicerContext
    ) -> tpb.DeleteTemplateResponse:
        principal = self.user(context)
        with self.ctx.unit_of_work() as w:
            templates.delete(self.ctx, w, principal, request.template_name)
        return tpb.DeleteTemplateResponse()

"""The audit trail, for admins (`cairn audit list`, the WebUI's Audit page, GET /api/v1/audit)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from cairn.api.v1 import audit_pb2
from services.master.domain.audit import queries, targets
from services.master.domain.kernel.errors import InvalidArgument
from services.master.servicers.api import convert
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.audit_methods import method_table
from services.master.servicers.errors import rpc
from services.master.store import models

# The REST route of each method, by name, for the answer (the table is built once).
_ROUTES = {entry.name: entry.route for entry in method_table().values()}


def _time(request: audit_pb2.GetAuditEventsRequest, field: Literal["since", "until"]) -> datetime | None:
    if not request.HasField(field):
        return None
    stamp: Timestamp = getattr(request, field)
    try:
        return stamp.ToDatetime(UTC)
    except (ValueError, OverflowError) as exc:
        raise InvalidArgument(f"{field}: not a time this master can read ({exc})") from None


def event_pb(row: models.AuditEvent) -> audit_pb2.AuditEvent:
    return audit_pb2.AuditEvent(
        id=row.id,
        time=convert.ts(row.at),
        user_id=row.user_id or 0,
        username=row.username,
        actor=row.actor,
        allocation_id=row.allocation_id,
        method=row.method,
        route=_ROUTES.get(row.method, ""),
        targets=targets.decode(row.targets),
        outcome=row.outcome,
        error=row.error,
        address=row.address,
        transport=row.transport,
        duration_ms=row.duration_ms,
    )


class AuditApi(ServicerBase):
    @rpc
    def GetAuditEvents(
        self, request: audit_pb2.GetAuditEventsRequest, context: grpc.ServicerContext
    ) -> audit_pb2.GetAuditEventsResponse:
        principal = self.user(context)
        page = queries.list_events(
            self.ctx,
            principal,
            queries.AuditFilter(
                username=request.username,
                since=_time(request, "since"),
                until=_time(request, "until"),
                method=request.method,
                outcome=request.outcome,
                target=request.target,
                limit=request.limit,
                before_id=request.before_id,
            ),
        )
        return audit_pb2.GetAuditEventsResponse(
            events=[event_pb(row) for row in page.events], next_before_id=page.next_before_id
        )

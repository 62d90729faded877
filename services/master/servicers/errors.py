"""The master's handler decorators: its domain errors (and refused transitions) become their
statuses through the mapping every service shares; every request is checked for NUL characters."""

from __future__ import annotations

from typing import Any

from services.common.status import handlers
from services.master.domain.errors import DomainError, InvalidArgument
from services.master.domain.states import InvalidTransition
from services.master.servicers.request_checks import nul_field


def _check_request(request: Any) -> None:
    field = nul_field(request)
    if field is not None:
        raise InvalidArgument(f"{field}: must not contain NUL characters")


rpc, stream_rpc = handlers((DomainError, InvalidTransition), _check_request)

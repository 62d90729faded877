"""The master's handler decorators: its domain errors (and refused transitions) become their
statuses through the mapping every service shares; every request is checked for NUL characters;
a unary call that a database outage interrupted runs again while that is safe (domain/kernel/outage.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from services.common.status import handlers
from services.master.domain.kernel.errors import DomainError, InvalidArgument
from services.master.domain.kernel.outage import ride_out
from services.master.domain.kernel.states import InvalidTransition
from services.master.servicers.request_checks import nul_field

# Calls that may run again even when a lost connection left their commit in doubt: storing them
# twice stores them once. Metric reports are matched by sequence number (or, without one, merged
# into the report of the same step, as Determined does); progress and runner status are set, not
# added to; an early exit reported again with the same reason is taken as done.
IDEMPOTENT_CALLS = frozenset(
    {
        "ReportTrialMetrics",
        "ReportTrialMetricsBatch",
        "ReportTrialProgress",
        "PostTrialRunnerMetadata",
        "ReportTrialSearcherEarlyExit",
    }
)


def _check_request(request: Any) -> None:
    field = nul_field(request)
    if field is not None:
        raise InvalidArgument(f"{field}: must not contain NUL characters")


def _ride_out_outages(name: str, call: Callable[[], Any]) -> Any:
    return ride_out(call, what=name, idempotent=name in IDEMPOTENT_CALLS)


F = TypeVar("F", bound=Callable[..., Any])

rpc, stream_rpc = handlers((DomainError, InvalidTransition), _check_request, attempt=_ride_out_outages)


def named_rpc(name: str, handler: F) -> F:
    """`rpc` for a handler made for a route rather than written as its method: named as the RPC
    first, since the name is what errors are answered and outages retried by."""
    handler.__name__ = handler.__qualname__ = name
    return rpc(handler)

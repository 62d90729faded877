"""What the servicer tests hand a servicer in place of gRPC's: a context whose abort raises
(Aborted, with the status), and the servicer's dependencies over an in-process master, each one a
test does not give left None."""

from __future__ import annotations

from typing import Any, NoReturn

import grpc

from services.master.servicers.api.base import ApiDeps
from tests.unit.master.domain.harness import Master


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code


class Context:
    """What handlers ask of a call's context: abort it with a status; whether its client is still
    there; its metadata (none)."""

    def abort(self, code: grpc.StatusCode, details: str) -> NoReturn:
        raise Aborted(code, details)

    def is_active(self) -> bool:
        return True

    def invocation_metadata(self) -> tuple[()]:
        return ()


def api_deps(master: Master, **given: Any) -> ApiDeps:
    """The servicer's dependencies: the master's domain, and what the test gives by name."""
    fields: dict[str, Any] = dict.fromkeys(ApiDeps.__dataclass_fields__)
    fields.update(ctx=master.ctx, version="test", database="sqlite")
    fields.update(given)
    return ApiDeps(**fields)

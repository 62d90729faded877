"""The one mapping from error kinds to gRPC statuses, and the handler decorators every service's
edge uses: an error with a `kind` (services/common/errors.py, or any exception carrying one)
becomes that status with its message; anything else is a bug and stays INTERNAL."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any, NoReturn, TypeVar

import grpc

from cairn.metadata_keys import COMMIT_UNKNOWN_KEY

STATUS_OF_KIND = {
    "INVALID_ARGUMENT": grpc.StatusCode.INVALID_ARGUMENT,
    "NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "ALREADY_EXISTS": grpc.StatusCode.ALREADY_EXISTS,
    "FAILED_PRECONDITION": grpc.StatusCode.FAILED_PRECONDITION,
    "UNAUTHENTICATED": grpc.StatusCode.UNAUTHENTICATED,
    "PERMISSION_DENIED": grpc.StatusCode.PERMISSION_DENIED,
    "RESOURCE_EXHAUSTED": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "ABORTED": grpc.StatusCode.ABORTED,
    "UNAVAILABLE": grpc.StatusCode.UNAVAILABLE,
    "INTERNAL": grpc.StatusCode.INTERNAL,
}

F = TypeVar("F", bound=Callable[..., Any])
# Which exceptions a service's handlers answer with a status (their own error bases).
Answerable = tuple[type[BaseException], ...]
# Runs one unary call (the handler's name, the call): a service may run it more than once.
Attempt = Callable[[str, Callable[[], Any]], Any]


def status_of(exc: BaseException) -> grpc.StatusCode:
    return STATUS_OF_KIND.get(str(getattr(exc, "kind", "INTERNAL")), grpc.StatusCode.INTERNAL)


def abort_with(context: grpc.ServicerContext, exc: BaseException) -> None:
    if getattr(exc, "commit_unknown", False):
        # The change may have been stored: clients must not send a non-idempotent call again.
        context.set_trailing_metadata(((COMMIT_UNKNOWN_KEY, "1"),))
    context.abort(status_of(exc), str(exc) or type(exc).__name__)


async def abort_with_async(context: grpc.aio.ServicerContext, exc: BaseException) -> NoReturn:
    """abort_with for a coroutine handler (the asyncio server's)."""
    if getattr(exc, "commit_unknown", False):
        context.set_trailing_metadata(((COMMIT_UNKNOWN_KEY, "1"),))
    await context.abort(status_of(exc), str(exc) or type(exc).__name__)


def handlers(
    answerable: Answerable,
    check: Callable[[Any], None] | None = None,
    on_error: Callable[[str, BaseException], None] | None = None,
    attempt: Attempt | None = None,
) -> tuple[Callable[[F], F], Callable[[F], F]]:
    """(unary decorator, server-streaming decorator) for a service whose domain raises `answerable`
    errors; `check` vets each request first (raising one of them); `on_error` hears of each error
    answered (the handler's name and the error), to log it; `attempt` runs each unary call (the
    master's runs a call again that a database outage interrupted). A streaming call is not run
    again: what it sent cannot be taken back."""

    def answer(context: grpc.ServicerContext, name: str, exc: BaseException) -> None:
        if on_error is not None:
            on_error(name, exc)
        abort_with(context, exc)

    def unary(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
            try:
                if check is not None:
                    check(request)
                if attempt is not None:
                    return attempt(fn.__name__, lambda: fn(self, request, context))
                return fn(self, request, context)
            except answerable as exc:
                answer(context, fn.__name__, exc)

        return wrapper  # type: ignore[return-value]

    def streaming(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            try:
                if check is not None:
                    check(request)
                yield from fn(self, request, context)
            except answerable as exc:
                answer(context, fn.__name__, exc)

        return wrapper  # type: ignore[return-value]

    return unary, streaming

"""What a route (http_answers.PlainRoute) may ask of a request: the public ASGI server's
asgi_app.AsgiRequest is one; so may a test's stand-in be. The task proxy is no route: it takes the
ASGI scope itself (task_proxy.py)."""

from __future__ import annotations

from email.message import Message
from typing import Any, Protocol


class HttpRequest(Protocol):
    @property
    def path(self) -> str:
        """The request target as sent: percent-encoded path, then `?query` if any."""

    @property
    def command(self) -> str:
        """The HTTP method."""

    @property
    def headers(self) -> Message:
        """Request headers; `get` is case-insensitive."""

    @property
    def client_address(self) -> Any:
        """(host, port) of the peer."""

    def read_body(self, limit: int = ...) -> bytes:
        """The body, read once; BodyError when malformed or over `limit` bytes."""

    def leave_turns(self) -> None:
        """The request turns into a long-lived exchange: it gives back its turn."""

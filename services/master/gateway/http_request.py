"""What a route may ask of a request, whichever server carries it: the threaded loopback listener
(http_server.RequestHandler) or the public ASGI server (asgi_app.AsgiRequest). Routes typed with
this protocol run under both; routes that write to the socket themselves (the task proxy) take
the RequestHandler and run only on the loopback listener."""

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

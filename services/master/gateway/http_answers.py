"""What a route answers on the public port (asgi_app.py runs the routes): a whole Response, a
StreamingResponse written as it is produced, or a BodyError for a request body it cannot take;
and the bounds on request bodies."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from services.master.gateway.http_request import HttpRequest

# Model definitions travel as base64 JSON: 128 MiB of gRPC message is about 171 MiB of text. Only
# the calls that carry them may send this much (rest_gateway.py's LARGE_BODY_RPCS).
MAX_BODY_BYTES = 192 * 1024 * 1024
# Every other call: the largest real bodies (metric batches, checkpoint file lists, a 1 MiB config
# with its notes) are a few MiB; a body over this is refused from its Content-Length, unread.
MAX_REQUEST_BODY_BYTES = 16 * 1024 * 1024


@dataclass
class Response:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] | None = None


@dataclass
class StreamingResponse:
    """An answer written as it is produced: each item of `chunks` goes out at once, as one chunk.

    `cancel` stops the producer (it is called from another thread when the client disconnects);
    `chunks` is closed in every case once the answer ends. `read_ahead`: the stream ends on its own
    without waiting for anything to happen (a trial's metrics, logs not followed), so the server
    may read it ahead and answer it whole when it is short; never for a stream that waits (a
    followed log, periodic samples), which would not be answered at all until it ended.
    """

    status: int
    chunks: Iterator[bytes]
    cancel: Callable[[], None]
    content_type: str = "application/json"
    headers: dict[str, str] | None = None
    read_ahead: bool = False


class BodyError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


# A route gets the request (method, path, headers, body reader) and answers, or returns None to
# let the next route try. Routes are synchronous: asgi_app runs each request's in a thread.
PlainRoute = Callable[[HttpRequest], Response | StreamingResponse | None]

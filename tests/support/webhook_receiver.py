"""A webhook receiver for tests: a real HTTP server on 127.0.0.1 that keeps what it is posted and
answers with the statuses it is told (e.g. 500 first, to show a retry), then 200."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def signed_with(self, key: str) -> bool:
        """Checked as Determined's docs tell a receiver to (timestamp, comma, body; HMAC-SHA256)."""
        timestamp = self.headers["X-Determined-AI-Signature-Timestamp"]
        expected = hmac.new(key.encode(), f"{timestamp},".encode() + self.body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(expected, self.headers["X-Determined-AI-Signature"])


class Receiver:
    def __init__(self, statuses: list[int] | None = None) -> None:
        self.received: list[Received] = []
        self.answered: list[int] = []
        self._statuses = list(statuses or [])
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                with receiver._lock:
                    status = receiver._statuses.pop(0) if receiver._statuses else 200
                    receiver.answered.append(status)
                    if status < 400:
                        receiver.received.append(Received(self.path, dict(self.headers.items()), body))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # shutdown() waits for the loop's next poll: the default half second was most of a test.
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)
        self._thread.start()

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{path}"

    def bodies(self, path: str | None = None) -> list[Any]:
        with self._lock:
            return [r.json() for r in self.received if path is None or r.path == path]

    def wait_for(self, check: Callable[[list[Received]], bool], timeout_s: float = 120.0) -> list[Received]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                got = list(self.received)
            if check(got):
                return got
            time.sleep(0.05)
        raise AssertionError(f"the receiver did not get what was awaited in {timeout_s} s; it got {got}")

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

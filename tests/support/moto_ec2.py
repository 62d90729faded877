"""moto's server mode for the AWS provider's tests: a real HTTP endpoint speaking EC2's API.

moto keeps its backends' state per process, not per server: a server started after another test's
in the same pytest run would still hold that test's launch templates and instances. Each server is
reset when it starts and when it stops, so every test begins with an empty account.
"""

from __future__ import annotations

import logging
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

from moto.server import ThreadedMotoServer


def _reset(endpoint: str) -> None:
    request = urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST", data=b"")
    with urllib.request.urlopen(request, timeout=10) as answer:
        answer.read()


@contextmanager
def moto_server() -> Iterator[str]:
    """A moto server on a free loopback port, empty; yields its endpoint URL."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    try:
        _reset(endpoint)
        yield endpoint
    finally:
        try:
            _reset(endpoint)
        finally:
            server.stop()

"""The master's gRPC address: where it comes from (flag, environment, default) and what it may look like."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from cairn.client.errors import CairnError

MASTER_ENV = "CAIRN_MASTER"
DEFAULT_GRPC_PORT = 8090
DEFAULT_MASTER = f"localhost:{DEFAULT_GRPC_PORT}"


class InvalidMasterAddress(CairnError):
    pass


@dataclass(frozen=True)
class MasterAddress:
    host: str
    port: int

    @property
    def target(self) -> str:
        """host:port as gRPC dials it (IPv6 literals in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def __str__(self) -> str:
        return self.target


def _parse_port(text: str, original: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise InvalidMasterAddress(f"master address {original!r}: port {text!r} must be a number in 1..65535")
    return int(text)


def parse_master_address(text: str) -> MasterAddress:
    """Accept "host", "host:port", "[v6]:port" and "grpc://host:port"; refuse HTTP URLs with a hint,
    because the REST port (8080) does not speak the gRPC the CLI uses."""
    original = text
    raw = text.strip()
    if not raw:
        raise InvalidMasterAddress("master address is empty; expected host:port, e.g. localhost:8090")
    lowered = raw.lower()
    if lowered.startswith(("http://", "https://")):
        host = urlsplit(raw).hostname or "localhost"
        raise InvalidMasterAddress(
            f"master address {original!r} is an HTTP URL; the cairn CLI talks gRPC to the master: "
            f"pass its gRPC address, e.g. -m {host}:{DEFAULT_GRPC_PORT}"
        )
    if lowered.startswith("grpc://"):
        raw = raw[len("grpc://") :]
    elif "://" in raw:
        scheme = raw.split("://", 1)[0]
        raise InvalidMasterAddress(
            f"master address {original!r}: scheme {scheme!r} is not supported; use host:port or grpc://host:port"
        )
    raw = raw.rstrip("/")
    if "/" in raw or any(ch.isspace() for ch in raw):
        raise InvalidMasterAddress(f"master address {original!r}: expected host:port with no path")

    if raw.startswith("["):
        host, bracket, rest = raw[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise InvalidMasterAddress(f"master address {original!r}: malformed IPv6 address")
        port = _parse_port(rest[1:], original) if rest else DEFAULT_GRPC_PORT
    elif raw.count(":") == 1:
        host, port_text = raw.split(":")
        port = _parse_port(port_text, original)
    elif raw.count(":") > 1:
        # A bare IPv6 literal: without brackets its last group cannot be told from a port.
        host, port = raw, DEFAULT_GRPC_PORT
    else:
        host, port = raw, DEFAULT_GRPC_PORT
    if not host:
        raise InvalidMasterAddress(f"master address {original!r}: the host is missing")
    return MasterAddress(host=host, port=port)


def resolve_master_address(flag: str | None, env: Mapping[str, str] | None = None) -> MasterAddress:
    """-m/--master wins over $CAIRN_MASTER, which wins over localhost:8090."""
    environ = os.environ if env is None else env
    return parse_master_address(flag or environ.get(MASTER_ENV) or DEFAULT_MASTER)

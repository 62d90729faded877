"""The master's gRPC address: where it comes from (flag, environment, default) and what it may look like.

Several addresses, comma-separated ("host1:8090,host2:8090"), name an active master and its standbys.
They are dialled as one gRPC channel over all of them (see `MasterAddresses.dial_target`), so every
kind of call, streams included, fails over without code of its own: a standby keeps its ports closed
until it leads, and the channel connects to the first address that accepts.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterable, Mapping
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
    # Written grpcs://: TLS even without a CA of its own (the system's CAs verify the master).
    tls: bool = False

    @property
    def target(self) -> str:
        """host:port as gRPC dials it (IPv6 literals in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def dial_target(self) -> str:
        return self.target

    def __str__(self) -> str:
        return self.target


@dataclass(frozen=True)
class MasterAddresses:
    """A master's addresses in the order they are tried: an active master and its standbys."""

    endpoints: tuple[MasterAddress, ...]

    @property
    def tls(self) -> bool:
        return any(e.tls for e in self.endpoints)

    @property
    def target(self) -> str:
        """The addresses as users write them: shown in messages, and the token store's key."""
        return ",".join(e.target for e in self.endpoints)

    @property
    def dial_target(self) -> str:
        """The gRPC target of one channel over every address.

        gRPC's `ipv4:`/`ipv6:` targets list several addresses; its default policy (pick_first)
        connects to the first that accepts and, when that connection drops, tries them in order
        again. Host names are resolved once, here: those targets take IP addresses only."""
        if len(self.endpoints) == 1:
            return self.endpoints[0].target
        return pick_first_target(self.endpoints)

    def __str__(self) -> str:
        return self.target


# What commands and sessions accept: one address or several.
MasterEndpoints = MasterAddress | MasterAddresses


def _parse_port(text: str, original: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise InvalidMasterAddress(f"master address {original!r}: port {text!r} must be a number in 1..65535")
    return int(text)


def parse_master_address(text: str) -> MasterAddress:
    """Accept "host", "host:port", "[v6]:port", "grpc://host:port" and "grpcs://host:port" (TLS);
    refuse HTTP URLs with a hint,
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
    tls = lowered.startswith("grpcs://")
    if lowered.startswith(("grpc://", "grpcs://")):
        raw = raw.split("://", 1)[1]
    elif "://" in raw:
        scheme = raw.split("://", 1)[0]
        raise InvalidMasterAddress(
            f"master address {original!r}: scheme {scheme!r} is not supported; use host:port, "
            "grpc://host:port or grpcs://host:port"
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
    return MasterAddress(host=host, port=port, tls=tls)


def parse_master_addresses(text: str) -> MasterAddresses:
    """One address or several, comma-separated, each in a form `parse_master_address` accepts."""
    parts = [part.strip() for part in text.split(",")]
    if len(parts) > 1 and not all(parts):
        raise InvalidMasterAddress(f"master addresses {text!r}: an address between commas is empty")
    endpoints: list[MasterAddress] = []
    for part in parts:
        endpoint = parse_master_address(part)
        if endpoint not in endpoints:
            endpoints.append(endpoint)
    return MasterAddresses(tuple(endpoints))


def resolve_master_address(flag: str | None, env: Mapping[str, str] | None = None) -> MasterAddresses:
    """-m/--master wins over $CAIRN_MASTER, which wins over localhost:8090."""
    environ = os.environ if env is None else env
    return parse_master_addresses(flag or environ.get(MASTER_ENV) or DEFAULT_MASTER)


def _ip_addresses(endpoint: MasterAddress) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    try:
        return [ipaddress.ip_address(endpoint.host)]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(endpoint.host, endpoint.port, type=socket.SOCK_STREAM)
    except OSError:
        return []
    found: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = []
    for info in infos:
        ip = ipaddress.ip_address(str(info[4][0]).split("%")[0])
        if ip not in found:
            found.append(ip)
    return found


def pick_first_target(endpoints: Iterable[MasterAddress]) -> str:
    """An `ipv4:` (or, where some host has no IPv4 address, `ipv6:`) target over every address of
    every endpoint, in order. A host whose name does not resolve is left out while another does:
    a standby that cannot be found must not keep the active master from being reached."""
    resolved = [(endpoint, _ip_addresses(endpoint)) for endpoint in endpoints]
    if not any(ips for _, ips in resolved):
        names = ", ".join(endpoint.target for endpoint, _ in resolved)
        raise InvalidMasterAddress(f"master addresses {names}: no host name resolves")
    reachable = [(endpoint, ips) for endpoint, ips in resolved if ips]
    if all(any(ip.version == 4 for ip in ips) for _, ips in reachable):
        v4 = [f"{ip}:{e.port}" for e, ips in reachable for ip in ips if ip.version == 4]
        return "ipv4:" + ",".join(v4)
    if all(any(ip.version == 6 for ip in ips) for _, ips in reachable):
        v6 = [f"[{ip}]:{e.port}" for e, ips in reachable for ip in ips if ip.version == 6]
        return "ipv6:" + ",".join(v6)
    names = ", ".join(endpoint.target for endpoint, _ in reachable)
    raise InvalidMasterAddress(
        f"master addresses {names}: some hosts have only IPv4 addresses and others only IPv6; "
        "one channel over them needs one family"
    )

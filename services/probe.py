"""Health probes for the service image (`cairn-probe`): what Docker's HEALTHCHECK and Kubernetes'
exec probes run inside a service's container. Exit 0 healthy, 1 not, with one line saying why.

    cairn-probe grpc HOST:PORT          grpc.health.v1 Check answers SERVING (scheduler, searcher,
                                        checkpoint, agent; the master's gRPC port)
    cairn-probe http URL                the URL answers 200 (the master's /healthz: its database too)
    cairn-probe master-alive URL PEER   the master is alive: URL answers at all, or, when this
                                        master is a standby with its ports closed (leadership.py),
                                        another master's HTTP at PEER (HOST:PORT; every address the
                                        name resolves to) answers. Kubernetes' liveness probe, so
                                        that a standby waiting for the lease is not restarted
    cairn-probe auto                    the service this container runs, found from its command
                                        line and read with its own flags: the image's HEALTHCHECK

Answers are bounded: the probe reads at most a few bytes of a response and waits at most
--timeout seconds per address.
"""

from __future__ import annotations

import argparse
import http.client
import socket
import ssl
import sys
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

DEFAULT_TIMEOUT_S = 3.0
# The most addresses `master-alive` tries for PEER (a Deployment's masters: one active, standbys).
MAX_PEER_ADDRESSES = 16
# The modules the image's entry points run (scripts/build_service_image.py writes the wrappers).
SERVICE_MODULES = {
    "services.master": "master",
    "services.scheduler": "scheduler",
    "services.searcher": "searcher",
    "services.checkpoint": "checkpoint",
    "services.agent": "agent",
}
# Processes looked at for the service (a container's are few: an init, the service, its children).
MAX_PROCESSES = 4096
_WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")


class ProbeFailed(Exception):
    """Not healthy; the message says what was asked and what answered."""


def check_grpc(address: str, timeout_s: float) -> str:
    # Imported here: `cairn-probe http` must work where grpc is slow to import (every probe is a
    # fresh interpreter).
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(address) as channel:
        try:
            response = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=timeout_s
            )
        except grpc.RpcError as exc:
            raise ProbeFailed(f"grpc {address}: {exc.code().name}")
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
    if status != "SERVING":
        raise ProbeFailed(f"grpc {address}: {status}")
    return f"grpc {address}: SERVING"


def http_status(url: str, timeout_s: float) -> int:
    """The status of GET URL. Over https the certificate is not verified: a probe asks the process
    beside it whether it answers, not who it is (Kubernetes' httpGet probes do the same)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ProbeFailed(f"{url}: expected http://HOST[:PORT]/PATH or https://...")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    path = parts.path or "/"
    connection: http.client.HTTPConnection
    if parts.scheme == "https":
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        connection = http.client.HTTPSConnection(parts.hostname, port, timeout=timeout_s, context=context)
    else:
        connection = http.client.HTTPConnection(parts.hostname, port, timeout=timeout_s)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        response.read(4096)
        return response.status
    except (OSError, http.client.HTTPException) as exc:
        raise ProbeFailed(f"{url}: {exc}")
    finally:
        connection.close()


def check_http(url: str, timeout_s: float) -> str:
    status = http_status(url, timeout_s)
    if status != 200:
        raise ProbeFailed(f"{url}: HTTP {status}")
    return f"{url}: HTTP 200"


def check_master_alive(url: str, peer: str, timeout_s: float) -> str:
    try:
        return f"{url}: HTTP {http_status(url, timeout_s)} (serving)"
    except ProbeFailed as own:
        reasons = [str(own)]
    host, _, port_text = peer.rpartition(":")
    if not host or not port_text.isdigit():
        raise ProbeFailed(f"PEER: {peer!r}: expected HOST:PORT")
    try:
        found = socket.getaddrinfo(host, int(port_text), type=socket.SOCK_STREAM)
    except OSError as exc:
        raise ProbeFailed(f"{reasons[0]}; peer {peer}: {exc}")
    scheme = urlsplit(url).scheme or "http"
    addresses = list(dict.fromkeys(str(info[4][0]) for info in found))[:MAX_PEER_ADDRESSES]
    for address in addresses:
        literal = f"[{address}]" if ":" in address else address
        peer_url = f"{scheme}://{literal}:{port_text}/healthz"
        try:
            status = http_status(peer_url, timeout_s)
        except ProbeFailed as exc:
            reasons.append(str(exc))
            continue
        return f"standby: {peer_url} answers HTTP {status} while this master waits for the lease"
    raise ProbeFailed("no master answers: " + "; ".join(reasons))


def _local_host(bind_host: str) -> str:
    return "127.0.0.1" if bind_host in _WILDCARD_HOSTS else bind_host


def auto_target(cmdline: Sequence[str]) -> tuple[str, str]:
    """("grpc", HOST:PORT) or ("http", URL) for the service the command line runs, read with that
    service's own flags (and this process's environment, which a container's probes share)."""
    if "-m" not in cmdline or cmdline.index("-m") + 1 >= len(cmdline):
        raise ProbeFailed(f"{' '.join(cmdline)[:200]!r} is not a Cairn service")
    at = cmdline.index("-m")
    module, argv = cmdline[at + 1], list(cmdline[at + 2 :])
    service = SERVICE_MODULES.get(module)
    if service is None:
        raise ProbeFailed(f"the module {module!r} is not a Cairn service")
    if service == "master":
        from services.master.configuration.settings import parse_settings

        settings = parse_settings(argv)
        scheme = "https" if settings.tls_cert else "http"
        return "http", f"{scheme}://{_local_host(settings.host)}:{settings.http_port}/healthz"
    from services.common.args import add_common_flags

    parser = argparse.ArgumentParser(add_help=False)
    add_common_flags(parser, default_port=0)
    known, _ = parser.parse_known_args(argv)
    if not known.port:
        raise ProbeFailed(f"the {service} was started without a fixed --port: nothing to probe")
    return "grpc", f"{_local_host(known.host)}:{known.port}"


def service_cmdline(proc: Path = Path("/proc")) -> list[str]:
    """The command line of the container's service: PID 1's, or, where PID 1 is an init process
    (docker --init, a pod sharing its process namespace), the lowest PID that runs a service."""
    pids = sorted(int(p.name) for p in proc.iterdir() if p.name.isdigit())
    for pid in pids[:MAX_PROCESSES]:
        try:
            raw = (proc / str(pid) / "cmdline").read_bytes()[:65536]
        except OSError:
            continue  # ended meanwhile, or not ours to read
        cmdline = [part.decode(errors="replace") for part in raw.split(b"\0") if part]
        if "-m" in cmdline[:-1] and cmdline[cmdline.index("-m") + 1] in SERVICE_MODULES:
            return cmdline
    raise ProbeFailed("no Cairn service runs in this container")


def run(argv: Sequence[str] | None = None) -> str:
    parser = argparse.ArgumentParser(prog="cairn-probe", description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per address")
    sub = parser.add_subparsers(dest="kind", required=True)
    sub.add_parser("grpc").add_argument("address", metavar="HOST:PORT")
    sub.add_parser("http").add_argument("url")
    alive = sub.add_parser("master-alive")
    alive.add_argument("url")
    alive.add_argument("peer", metavar="PEER")
    sub.add_parser("auto")
    args = parser.parse_args(argv)
    if not 0 < args.timeout <= 60:
        parser.error(f"--timeout: must be between 0 and 60 seconds, not {args.timeout:g}")
    if args.kind == "grpc":
        return check_grpc(args.address, args.timeout)
    if args.kind == "http":
        return check_http(args.url, args.timeout)
    if args.kind == "master-alive":
        return check_master_alive(args.url, args.peer, args.timeout)
    kind, target = auto_target(service_cmdline())
    return check_grpc(target, args.timeout) if kind == "grpc" else check_http(target, args.timeout)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        print(run(argv))
    except ProbeFailed as exc:
        print(f"cairn-probe: unhealthy: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

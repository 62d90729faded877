"""TLS on the master's ports: the certificate pair is checked before anything listens, gRPC and
HTTPS verify against the CA, plaintext clients are refused, and plaintext beyond loopback needs
the operator's word."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import requests
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cairn.client.address import parse_master_address, parse_master_addresses
from cairn.client.errors import rpc_error_message
from cairn.localcluster.certificate import CertificatePair, ensure_certificate
from cairn.tls import TlsConfigError, ca_from_environment, channel_credentials, read_ca_bundle
from services.common.server import ServiceServer, start_server
from services.common.tls import ServerTls, TlsSetupError
from services.master.configuration.settings import parse_settings
from services.master.domain.identity.exposure import UnsafeExposure, check_transport
from services.master.gateway.http_answers import Response, StreamingResponse
from services.master.gateway.http_limits import HttpLimits
from services.master.gateway.public_server import PublicHttpServer, start_public_http


@pytest.fixture
def pair(tmp_path: Path) -> CertificatePair:
    pair = CertificatePair(tmp_path / "tls" / "master.crt", tmp_path / "tls" / "master.key")
    ensure_certificate(pair, "127.0.0.1")
    return pair


@pytest.fixture
def other_ca(tmp_path: Path) -> Path:
    other = CertificatePair(tmp_path / "other" / "master.crt", tmp_path / "other" / "master.key")
    ensure_certificate(other, "127.0.0.1")
    return other.cert_file


@pytest.fixture
def tls_grpc(pair: CertificatePair) -> Iterator[ServiceServer]:
    server = start_server(
        "test", lambda _s: [], host="127.0.0.1", port=0, tls=ServerTls.load(pair.cert_file, pair.key_file)
    )
    yield server
    server.stop(0)


@pytest.fixture
def tls_http(pair: CertificatePair) -> Iterator[PublicHttpServer]:
    def hello(_req: object) -> Response:
        return Response(200, json.dumps({"hello": "tls"}).encode())

    context = ServerTls.load(pair.cert_file, pair.key_file).ssl_context()
    server = start_public_http("127.0.0.1", 0, HttpLimits(), context)
    server.routes.append(hello)
    yield server
    server.shutdown()
    server.server_close()


def _health(channel: grpc.Channel) -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    return stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status


def test_grpc_over_tls_verifies_with_the_ca(tls_grpc: ServiceServer, pair: CertificatePair) -> None:
    credentials = channel_credentials(read_ca_bundle(pair.cert_file))
    for host in ("127.0.0.1", "localhost"):
        with grpc.secure_channel(f"{host}:{tls_grpc.port}", credentials) as channel:
            assert _health(channel) == health_pb2.HealthCheckResponse.SERVING


def test_an_untrusted_certificate_is_a_clear_error(tls_grpc: ServiceServer, other_ca: Path) -> None:
    credentials = channel_credentials(read_ca_bundle(other_ca))
    with (
        grpc.secure_channel(f"127.0.0.1:{tls_grpc.port}", credentials) as channel,
        pytest.raises(grpc.RpcError) as failure,
    ):
        _health(channel)
    message = rpc_error_message(failure.value, f"127.0.0.1:{tls_grpc.port}")
    assert "certificate could not be verified" in message and "--master-cert" in message, message


def test_a_plaintext_grpc_client_is_refused(tls_grpc: ServiceServer) -> None:
    with (
        grpc.insecure_channel(f"127.0.0.1:{tls_grpc.port}") as channel,
        pytest.raises(grpc.RpcError) as failure,
    ):
        _health(channel)
    assert failure.value.code() == grpc.StatusCode.UNAVAILABLE


def test_https_verifies_and_plain_http_is_refused(
    tls_http: PublicHttpServer, pair: CertificatePair, other_ca: Path
) -> None:
    port = tls_http.server_address[1]
    reply = requests.get(f"https://127.0.0.1:{port}/anything", verify=str(pair.cert_file), timeout=10)
    assert reply.json() == {"hello": "tls"}
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(f"https://127.0.0.1:{port}/", verify=str(other_ca), timeout=10)
    # Plain HTTP fails the TLS handshake: the connection is closed without an answer.
    plain = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    plain.request("GET", "/anything")
    with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
        plain.getresponse()
    # A client that sends garbage is closed; the server keeps serving.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as silent:
        silent.sendall(b"\x00" * 16)
        assert silent.recv(100) == b""
    again = requests.get(f"https://127.0.0.1:{port}/", verify=str(pair.cert_file), timeout=10)
    assert again.status_code == 200


def test_a_bad_pair_stops_the_master_before_it_listens(pair: CertificatePair, tmp_path: Path) -> None:
    other = CertificatePair(tmp_path / "o" / "c.crt", tmp_path / "o" / "c.key")
    ensure_certificate(other, "127.0.0.1")
    with pytest.raises(
        TlsSetupError, match=r"--tls-cert/--tls-key: .* not a usable certificate and key pair"
    ):
        ServerTls.load(pair.cert_file, other.key_file)
    with pytest.raises(TlsSetupError, match=r"--tls-cert: .* is not PEM"):
        ServerTls.load(pair.key_file, pair.key_file)
    with pytest.raises(TlsSetupError, match=r"--tls-key: cannot read .*missing.key"):
        ServerTls.load(pair.cert_file, tmp_path / "missing.key")


def test_plaintext_beyond_loopback_needs_the_operators_word() -> None:
    for host in ("127.0.0.1", "localhost", "::1"):
        check_transport(host, tls=False, allow_plaintext=False)
    check_transport("0.0.0.0", tls=True, allow_plaintext=False)
    check_transport("0.0.0.0", tls=False, allow_plaintext=True)
    with pytest.raises(
        UnsafeExposure, match=r"--host 10.0.0.5 .*no TLS.*--tls-cert.*--insecure-allow-plaintext"
    ):
        check_transport("10.0.0.5", tls=False, allow_plaintext=False)


def test_the_master_takes_a_cert_and_key_together(
    pair: CertificatePair, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = parse_settings(["--tls-cert", str(pair.cert_file), "--tls-key", str(pair.key_file)])
    assert (settings.tls_cert, settings.tls_key) == (pair.cert_file, pair.key_file)
    assert parse_settings(["--insecure-allow-plaintext"]).insecure_allow_plaintext
    with pytest.raises(SystemExit):
        parse_settings(["--tls-cert", str(pair.cert_file)])
    assert "give both" in capsys.readouterr().err


def test_client_ca_options_are_checked(pair: CertificatePair, tmp_path: Path) -> None:
    with pytest.raises(TlsConfigError, match=r"--master-cert: cannot read"):
        read_ca_bundle(tmp_path / "nope.crt")
    with pytest.raises(TlsConfigError, match=r"CAIRN_MASTER_CERT: .* holds no PEM certificate"):
        ca_from_environment({"CAIRN_MASTER_CERT": str(pair.key_file)})
    pem = pair.cert_file.read_text()
    assert ca_from_environment({"CAIRN_MASTER_CERT_PEM": pem}) == pem.encode()
    assert ca_from_environment({}) is None


def test_a_plaintext_client_of_a_tls_master_is_told_about_the_ca(tls_grpc: ServiceServer) -> None:
    with (
        grpc.insecure_channel(f"127.0.0.1:{tls_grpc.port}") as channel,
        pytest.raises(grpc.RpcError) as failure,
    ):
        _health(channel)
    message = rpc_error_message(failure.value, "m:1")
    assert "closed the connection" in message and "--master-cert" in message, message


def test_an_https_stream_runs_until_its_client_leaves(pair: CertificatePair) -> None:
    cancelled = threading.Event()

    def endless(_req: object) -> StreamingResponse:
        def chunks() -> Iterator[bytes]:
            yield b'{"n": 1}\n'
            while not cancelled.wait(0.05):
                yield b""  # idle, as a followed log with no new lines

        return StreamingResponse(200, chunks(), cancel=cancelled.set)

    context = ServerTls.load(pair.cert_file, pair.key_file).ssl_context()
    server = start_public_http("127.0.0.1", 0, HttpLimits(), context)
    server.routes.append(endless)
    try:
        client = ssl.create_default_context(cafile=str(pair.cert_file)).wrap_socket(
            socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=10),
            server_hostname="127.0.0.1",
        )
        with client:
            client.sendall(b"GET /follow HTTP/1.1\r\nHost: master\r\n\r\n")
            assert client.recv(4096).startswith(b"HTTP/1.1 200")
            time.sleep(1.0)
            assert not cancelled.is_set()  # an idle HTTPS follower is not taken for a gone one
        assert cancelled.wait(5), "the stream went on after its client left"
    finally:
        server.shutdown()
        server.server_close()


def test_a_grpcs_address_asks_for_tls() -> None:
    assert parse_master_address("grpcs://master.example:8443").tls
    assert parse_master_addresses("grpcs://a:1,b:2").tls
    assert not parse_master_address("grpc://master.example:8090").tls
    assert not parse_master_address("master.example:8090").tls

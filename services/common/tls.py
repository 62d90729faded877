"""TLS on the serving side: a certificate and key read once, as gRPC server credentials and as an
ssl context for the HTTP server, so both ports present the same certificate."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import grpc

# PEM certificates and keys are a few KiB; a far larger file is a wrong path, not a certificate.
MAX_PEM_BYTES = 1024 * 1024


class TlsSetupError(Exception):
    """The certificate or key cannot be used; the message names the flag."""


def _read_pem(path: Path, flag: str, marker: bytes) -> bytes:
    try:
        if path.stat().st_size > MAX_PEM_BYTES:
            raise TlsSetupError(f"{flag}: {path} is over {MAX_PEM_BYTES} bytes; expected PEM")
        data = path.read_bytes()
    except OSError as exc:
        raise TlsSetupError(f"{flag}: cannot read {path}: {exc.strerror or exc}") from None
    if marker not in data:
        raise TlsSetupError(f"{flag}: {path} is not PEM (no {marker.decode()!r} line)")
    return data


@dataclass(frozen=True)
class ServerTls:
    cert_file: Path
    key_file: Path
    cert_pem: bytes
    key_pem: bytes

    @classmethod
    def load(cls, cert_file: Path, key_file: Path) -> ServerTls:
        """Read and check the pair now, so a bad one stops the service before it listens."""
        cert_pem = _read_pem(cert_file, "--tls-cert", b"-----BEGIN CERTIFICATE-----")
        key_pem = _read_pem(key_file, "--tls-key", b"PRIVATE KEY-----")
        tls = cls(cert_file, key_file, cert_pem, key_pem)
        tls.ssl_context()  # OpenSSL checks that the key matches the certificate
        return tls

    def grpc_credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials([(self.key_pem, self.cert_pem)])

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.cert_file, self.key_file)
        except (ssl.SSLError, OSError) as exc:
            raise TlsSetupError(
                f"--tls-cert/--tls-key: {self.cert_file} and {self.key_file} are not a usable "
                f"certificate and key pair: {exc}"
            ) from None
        return context

"""TLS on the client side of a channel to the master: which CA to trust, (the words for a failed verification
are in client/errors.py).

The CA bundle comes from `--master-cert FILE` / $CAIRN_MASTER_CERT (a user's CLI or SDK, an agent)
or, inside a task, as PEM text in $CAIRN_MASTER_CERT_PEM (set by the agent: a file on the agent's
host is not readable by, or not even present for, a task running as another user or in a
container). A master address written `grpcs://host:port` asks for TLS with the system's CAs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import grpc

from cairn.client.errors import CairnError

MASTER_CERT_ENV = "CAIRN_MASTER_CERT"
MASTER_CERT_PEM_ENV = "CAIRN_MASTER_CERT_PEM"
# CA files are a few KiB; one far larger is not a certificate bundle.
MAX_CA_BYTES = 1024 * 1024


class TlsConfigError(CairnError):
    """A CA bundle that cannot be used (missing, unreadable, not PEM)."""


def read_ca_bundle(path: str | os.PathLike[str], what: str = "--master-cert") -> bytes:
    """The PEM certificates in `path`; TlsConfigError naming `what` when they cannot be used."""
    file = Path(path).expanduser()
    try:
        if file.stat().st_size > MAX_CA_BYTES:
            raise TlsConfigError(f"{what}: {file} is over {MAX_CA_BYTES} bytes; expected PEM certificates")
        data = file.read_bytes()
    except OSError as exc:
        raise TlsConfigError(f"{what}: cannot read {file}: {exc.strerror or exc}") from None
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise TlsConfigError(f"{what}: {file} holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
    return data


def ca_from_environment(env: Mapping[str, str] | None = None) -> bytes | None:
    """The CA a client trusts by default: $CAIRN_MASTER_CERT (a file), else $CAIRN_MASTER_CERT_PEM
    (the agent's CA handed to a task); None when neither is set."""
    environ = os.environ if env is None else env
    path = environ.get(MASTER_CERT_ENV)
    if path:
        return read_ca_bundle(path, MASTER_CERT_ENV)
    pem = environ.get(MASTER_CERT_PEM_ENV)
    if pem:
        if "-----BEGIN CERTIFICATE-----" not in pem:
            raise TlsConfigError(f"{MASTER_CERT_PEM_ENV}: holds no PEM certificate")
        return pem.encode()
    return None


def channel_credentials(ca_pem: bytes | None) -> grpc.ChannelCredentials:
    """Verifying credentials: the server's certificate must chain to `ca_pem` (the system's CAs
    when None) and name the host dialled."""
    return grpc.ssl_channel_credentials(root_certificates=ca_pem)

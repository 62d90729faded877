"""The self-signed certificate of `cairn cluster up --tls`: made once per state directory, for the
names and addresses this machine's clients dial (localhost, 127.0.0.1, ::1, the cluster's host),
and reused while it is valid and covers them, so a CA file already handed to clients (`det`,
CAIRN_MASTER_CERT) stays good across `cluster down` and `up`.

The certificate is its own CA: clients trust exactly this file. The key is written 0600 in a 0700
folder; the certificate is public (agents hand it to trials).
"""

from __future__ import annotations

import datetime
import ipaddress
import socket
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from cairn.client.token_store import write_private_file

VALIDITY = datetime.timedelta(days=365)
# A certificate this close to its end is replaced rather than reused.
RENEW_BEFORE = datetime.timedelta(days=30)
ALWAYS_NAMED = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True)
class CertificatePair:
    cert_file: Path
    key_file: Path


def subject_names(host: str) -> tuple[str, ...]:
    """What the certificate names: loopback, the cluster's bind host and this machine's name
    (0.0.0.0 and :: are not addresses anyone dials)."""
    names = list(ALWAYS_NAMED)
    for name in (host, socket.gethostname()):
        if name and name not in names and name not in ("0.0.0.0", "::"):
            names.append(name)
    return tuple(names)


def _alternative_names(names: tuple[str, ...]) -> list[x509.GeneralName]:
    result: list[x509.GeneralName] = []
    for name in names:
        try:
            result.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            result.append(x509.DNSName(name))
    return result


def _usable(pair: CertificatePair, names: tuple[str, ...], now: datetime.datetime) -> bool:
    """The pair on disk matches, lasts a while yet, and names every one of `names`."""
    try:
        cert = x509.load_pem_x509_certificate(pair.cert_file.read_bytes())
        key = serialization.load_pem_private_key(pair.key_file.read_bytes(), password=None)
        present = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, TypeError, x509.ExtensionNotFound):
        return False
    if key.public_key() != cert.public_key():
        return False
    if cert.not_valid_after_utc - RENEW_BEFORE < now:
        return False
    return all(entry in present for entry in _alternative_names(names))


def make_self_signed(names: tuple[str, ...], now: datetime.datetime) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM): an ECDSA P-256 certificate for `names` that is its own CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"cairn cluster ({names[-1]})")])
    public = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # clocks a little behind still accept it
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.SubjectAlternativeName(_alternative_names(names)), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def ensure_certificate(pair: CertificatePair, host: str, now: datetime.datetime | None = None) -> None:
    """Make (or remake) the pair when it is missing, does not match, expires within RENEW_BEFORE,
    or does not name `host`; otherwise leave it as it is."""
    tls_dir = pair.cert_file.parent
    moment = now or datetime.datetime.now(datetime.UTC)
    names = subject_names(host)
    tls_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    tls_dir.chmod(0o700)
    if _usable(pair, names, moment):
        return
    cert_pem, key_pem = make_self_signed(names, moment)
    write_private_file(pair.key_file, key_pem.decode())
    write_private_file(pair.cert_file, cert_pem.decode())
    pair.cert_file.chmod(0o644)

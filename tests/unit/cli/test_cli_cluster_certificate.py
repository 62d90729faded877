"""`cairn cluster up --tls`: the self-signed certificate, its files' modes, and when it is reused."""

from __future__ import annotations

import datetime
import stat
from pathlib import Path

from cryptography import x509

from cairn.localcluster import plan as plans
from cairn.localcluster.certificate import RENEW_BEFORE, VALIDITY, CertificatePair, ensure_certificate
from cairn.localcluster.paths import ClusterPaths


def _pair(tmp_path: Path) -> CertificatePair:
    return CertificatePair(tmp_path / "tls" / "master.crt", tmp_path / "tls" / "master.key")


def _names(pair: CertificatePair) -> list[str]:
    cert = x509.load_pem_x509_certificate(pair.cert_file.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return [str(name.value) for name in san]


def test_the_certificate_names_loopback_and_the_host_and_its_key_is_private(tmp_path: Path) -> None:
    pair = _pair(tmp_path)
    ensure_certificate(pair, "10.1.2.3")
    assert {"localhost", "127.0.0.1", "::1", "10.1.2.3"} <= set(_names(pair))
    assert stat.S_IMODE(pair.key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(pair.cert_file.parent.stat().st_mode) == 0o700
    cert = x509.load_pem_x509_certificate(pair.cert_file.read_bytes())
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert cert.issuer == cert.subject  # its own CA: clients trust exactly this file


def test_a_valid_certificate_is_reused_so_clients_keep_their_ca_file(tmp_path: Path) -> None:
    pair = _pair(tmp_path)
    ensure_certificate(pair, "127.0.0.1")
    first = pair.cert_file.read_bytes()
    ensure_certificate(pair, "127.0.0.1")
    assert pair.cert_file.read_bytes() == first


def test_a_certificate_is_remade_when_it_expires_soon_or_misses_the_host(tmp_path: Path) -> None:
    pair = _pair(tmp_path)
    ensure_certificate(pair, "127.0.0.1")
    first = pair.cert_file.read_bytes()
    near_the_end = datetime.datetime.now(datetime.UTC) + VALIDITY - RENEW_BEFORE / 2
    ensure_certificate(pair, "127.0.0.1", now=near_the_end)
    second = pair.cert_file.read_bytes()
    assert second != first
    ensure_certificate(pair, "192.0.2.7")
    assert pair.cert_file.read_bytes() != second
    assert "192.0.2.7" in _names(pair)


def test_a_key_that_does_not_match_the_certificate_is_replaced(tmp_path: Path) -> None:
    pair, other = _pair(tmp_path), _pair(tmp_path / "other")
    ensure_certificate(pair, "127.0.0.1")
    ensure_certificate(other, "127.0.0.1")
    pair.key_file.write_bytes(other.key_file.read_bytes())
    before = pair.cert_file.read_bytes()
    ensure_certificate(pair, "127.0.0.1")
    assert pair.cert_file.read_bytes() != before


def test_cluster_up_tls_gives_the_master_the_pair_and_the_agents_the_ca(tmp_path: Path) -> None:
    paths = ClusterPaths(tmp_path)
    options = plans.ClusterOptions(state_dir=tmp_path, tls=True)
    master = plans.master(options, paths, scheduler="a:1", searcher="b:2", checkpoint="c:3").command
    assert master[master.index("--tls-cert") + 1] == str(paths.tls_cert_file)
    assert master[master.index("--tls-key") + 1] == str(paths.tls_key_file)
    agent = plans.agent(options, paths, 1, "127.0.0.1:8090").command
    assert agent[agent.index("--master-cert") + 1] == str(paths.tls_cert_file)
    plaintext = plans.ClusterOptions(state_dir=tmp_path)
    assert (
        "--tls-cert"
        not in plans.master(plaintext, paths, scheduler="a:1", searcher="b:2", checkpoint="c:3").command
    )
    assert "--master-cert" not in plans.agent(plaintext, paths, 1, "127.0.0.1:8090").command

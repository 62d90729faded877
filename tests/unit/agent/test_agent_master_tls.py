"""An agent of a master with TLS: --master-cert is read and checked at start, and tasks get the CA
as text (a task under another user or in a container cannot read the agent's file) and an https
DET_MASTER."""

from __future__ import annotations

from pathlib import Path

import pytest

from cairn.localcluster.certificate import CertificatePair, ensure_certificate
from services.agent.containers.task_env import MasterFacts, task_environment
from services.agent.settings import parse_settings


def _env(master: MasterFacts) -> dict[str, str]:
    return task_environment(
        base={"PATH": "/usr/bin", "CAIRN_MASTER_CERT": "/agent/only/ca.crt"},
        spec_environment={},
        agent_id="a1",
        container_id="c1",
        slots=[],
        workdir=Path("/work"),
        master=master,
        python_env=None,
    )


def test_tasks_get_the_ca_as_text_and_an_https_master() -> None:
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    env = _env(MasterFacts(grpc_address="127.0.0.1:8090", http_port=8443, ca_pem=pem))
    assert env["CAIRN_MASTER_CERT_PEM"] == pem
    assert env["DET_MASTER"] == "https://127.0.0.1:8443"
    assert "CAIRN_MASTER_CERT" not in env  # the agent's own path is not the task's business
    plain = _env(MasterFacts(grpc_address="127.0.0.1:8090", http_port=8080))
    assert "CAIRN_MASTER_CERT_PEM" not in plain and plain["DET_MASTER"] == "http://127.0.0.1:8080"


def test_master_cert_is_read_at_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pair = CertificatePair(tmp_path / "tls" / "m.crt", tmp_path / "tls" / "m.key")
    ensure_certificate(pair, "127.0.0.1")
    settings = parse_settings(["--master-cert", str(pair.cert_file), "--work-dir", str(tmp_path / "w")])
    assert settings.master_ca_pem == pair.cert_file.read_text()
    with pytest.raises(SystemExit):
        parse_settings(["--master-cert", str(pair.key_file), "--work-dir", str(tmp_path / "w")])
    assert "--master-cert:" in capsys.readouterr().err

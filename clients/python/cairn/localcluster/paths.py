"""Where a local cluster keeps its files, all under one state directory."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

STATE_DIR_ENV = "CAIRN_STATE_DIR"


def default_state_dir(env: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if env is None else env
    if environ.get(STATE_DIR_ENV):
        return Path(environ[STATE_DIR_ENV]).expanduser()
    return Path.home() / ".local" / "share" / "cairn" / "cluster"


@dataclass(frozen=True)
class ClusterPaths:
    state_dir: Path

    @property
    def record_file(self) -> Path:
        return self.state_dir / "cluster.json"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def run_dir(self) -> Path:
        """Ready files: written by the services, read by the supervisor."""
        return self.state_dir / "run"

    @property
    def master_dir(self) -> Path:
        return self.state_dir / "master"

    @property
    def agents_dir(self) -> Path:
        return self.state_dir / "agents"

    @property
    def master_config_file(self) -> Path:
        """The master's config file (its resource pools), written for `cluster up --provision`."""
        return self.state_dir / "master.yaml"

    @property
    def provisioned_agents_dir(self) -> Path:
        """Where the master's local provider keeps its agents (services/master/provisioners/local.py:
        <master state dir>/provisioner/<pool>/<instance>)."""
        return self.master_dir / "provisioner"

    @property
    def tls_dir(self) -> Path:
        """`cluster up --tls`: the master's self-signed certificate and its key (certificate.py)."""
        return self.state_dir / "tls"

    @property
    def tls_cert_file(self) -> Path:
        return self.tls_dir / "master.crt"

    @property
    def tls_key_file(self) -> Path:
        return self.tls_dir / "master.key"

    def log_file(self, name: str) -> Path:
        return self.logs_dir / f"{name}.log"

    def ready_file(self, name: str) -> Path:
        return self.run_dir / f"{name}.ready.json"

    def agent_work_dir(self, agent_id: str) -> Path:
        return self.agents_dir / agent_id

    def join_token_file(self, agent_id: str) -> Path:
        """The one-time join token the agent enrols with (join_tokens.py), beside its work dir."""
        return self.agents_dir / f"{agent_id}.join-token"

    def create(self) -> None:
        for directory in (self.state_dir, self.logs_dir, self.run_dir, self.master_dir, self.agents_dir):
            directory.mkdir(parents=True, exist_ok=True)
            # The record holds the cluster token, the master's folder its database: owner only.
            directory.chmod(0o700)

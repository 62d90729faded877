"""cluster.json: what `cairn cluster up` started, so that `down` and `status` can find it again.

It holds the cluster token, so it is written like the login cache: atomically, mode 0600.
Two writers may want it at once (the watchdog restarting a service, `cairn cluster up` repairing
the cluster): each read-modify-write of the record happens under `record_lock`.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cairn.client.errors import CairnError
from cairn.client.token_store import write_private_file

RECORD_VERSION = 1


@dataclass
class ProcessRecord:
    name: str
    role: str
    pid: int
    command: list[str]
    log_path: str
    ready_file: str
    started_at: float
    host: str = "127.0.0.1"
    grpc_port: int | None = None
    http_port: int | None = None
    agent_id: str | None = None
    work_dir: str | None = None
    # Written by the watchdog (watchdog.py): how often it restarted this process, how the last run
    # ended, the recent runs that crashed ([started_at, ended_at], for the backoff), and why it
    # stopped restarting it ("" while it has not given up).
    restarts: int = 0
    last_exit: str = ""
    crashes: list[list[float]] = field(default_factory=list)
    gave_up: str = ""

    @property
    def grpc_address(self) -> str | None:
        return f"{self.host}:{self.grpc_port}" if self.grpc_port else None

    @property
    def serves(self) -> bool:
        """False for the watchdog, which has no address and no health to check."""
        return self.role != "watchdog"


@dataclass
class ClusterRecord:
    state_dir: str
    cluster_token: str
    created_at: float
    processes: list[ProcessRecord] = field(default_factory=list)
    master_grpc_address: str | None = None
    master_http_url: str | None = None
    # `cluster up --tls`: the certificate clients verify the master with (it is its own CA).
    master_ca_file: str | None = None
    # Environment added to every service's (ClusterOptions.extra_env), so that a restarted service
    # runs exactly as the first one did.
    extra_env: dict[str, str] = field(default_factory=dict)
    version: int = RECORD_VERSION

    def by_role(self, role: str) -> list[ProcessRecord]:
        return [p for p in self.processes if p.role == role]

    def by_name(self, name: str) -> ProcessRecord | None:
        return next((p for p in self.processes if p.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClusterRecord:
        processes = [ProcessRecord(**item) for item in data.get("processes", [])]
        fields = {k: v for k, v in data.items() if k != "processes"}
        return cls(processes=processes, **fields)


class RecordUnreadable(CairnError):
    pass


def save_record(path: Path, record: ClusterRecord) -> None:
    write_private_file(path, json.dumps(record.to_json(), indent=2) + "\n")


def load_record(path: Path) -> ClusterRecord | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        return ClusterRecord.from_json(json.loads(text))
    except (ValueError, TypeError) as exc:
        raise RecordUnreadable(f"{path} is not a cluster record Cairn can read ({exc})") from exc


def remove_record(path: Path) -> None:
    path.unlink(missing_ok=True)


@contextmanager
def record_lock(path: Path) -> Iterator[None]:
    """Hold the record's lock file (beside it) for one read-modify-write of the record."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)

"""A PostgreSQL 15 server of a test's own, so that the test may stop and start it: initdb and pg_ctl
into a fresh directory, listening on 127.0.0.1 only, on a free port, without a Unix socket.

PostgreSQL refuses to run as root: under root the server runs as the `postgres` user (runuser),
its directory given to that user. Tests skip, saying why, where the binaries or that user are
missing.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg2
import pytest

from tests.support.ports import free_port

PG_BIN = Path(os.environ.get("CAIRN_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
SERVER_USER = "postgres"


class PrivatePostgres:
    def __init__(self, data_dir: Path, port: int, run_as: str | None) -> None:
        self.data_dir = data_dir
        self.port = port
        self._run_as = run_as

    @property
    def url(self) -> str:
        return f"postgresql://{SERVER_USER}@127.0.0.1:{self.port}/cairn"

    def _run(self, *command: str, timeout: float = 60) -> None:
        argv = ["runuser", "-u", self._run_as, "--", *command] if self._run_as else list(command)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        assert done.returncode == 0, f"{' '.join(command)}: {done.stdout}{done.stderr}"

    def init(self) -> None:
        self._run(
            str(PG_BIN / "initdb"), "-D", str(self.data_dir), "-U", SERVER_USER, "--auth=trust", "-E", "UTF8"
        )

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c fsync=off"
        log = self.data_dir / "server.log"
        self._run(
            str(PG_BIN / "pg_ctl"), "-D", str(self.data_dir), "-l", str(log), "-o", options, "-w", "start"
        )

    def stop(self, mode: str = "fast") -> None:
        """`fast` ends every session at once (what a restart does to the master's connections)."""
        self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.data_dir), "-m", mode, "-w", "stop")

    def create_database(self) -> None:
        admin = psycopg2.connect(host="127.0.0.1", port=self.port, user=SERVER_USER, dbname="postgres")
        admin.autocommit = True
        try:
            with admin.cursor() as cursor:
                cursor.execute("CREATE DATABASE cairn")
        finally:
            admin.close()


def _server_user() -> str | None:
    """Who the server runs as: None for the current user, `postgres` under root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(SERVER_USER)
    except KeyError:
        pytest.skip(f"running as root and there is no '{SERVER_USER}' user to run PostgreSQL as")
    if shutil.which("runuser") is None:
        pytest.skip("running as root and runuser is missing")
    return SERVER_USER


@contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    if not (PG_BIN / "pg_ctl").exists():
        pytest.skip(f"PostgreSQL 15 binaries not found in {PG_BIN} (CAIRN_TEST_PG_BIN)")
    run_as = _server_user()
    # Not under pytest's tmp_path: the server's user must reach it, and root's tmp dirs are private.
    root = Path(tempfile.mkdtemp(prefix="cairn-pg-"))
    data_dir = root / "data"
    data_dir.mkdir()
    if run_as is not None:
        owner = pwd.getpwnam(run_as)
        for path in (root, data_dir):
            os.chown(path, owner.pw_uid, owner.pw_gid)
    server = PrivatePostgres(data_dir, free_port(), run_as)
    started = False
    try:
        server.init()
        server.start()
        started = True
        server.create_database()
        yield server
    finally:
        if started:
            subprocess.run(
                (["runuser", "-u", run_as, "--"] if run_as else [])
                + [str(PG_BIN / "pg_ctl"), "-D", str(data_dir), "-m", "immediate", "-w", "stop"],
                capture_output=True,
                timeout=60,
                check=False,
            )
        shutil.rmtree(root, ignore_errors=True)

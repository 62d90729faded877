"""Shared fixtures for the CLI tests: an isolated environment and a closed port."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

_CAIRN_ENV = (
    "CAIRN_MASTER",
    "CAIRN_USER_TOKEN",
    "CAIRN_USER",
    "CAIRN_PASSWORD",
    "CAIRN_CONFIG_DIR",
    "CAIRN_STATE_DIR",
    "CAIRN_DEBUG",
    "XDG_CONFIG_HOME",
)


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """No test reads or writes the real ~/.config/cairn or talks to a real cluster by accident."""
    for name in _CAIRN_ENV:
        monkeypatch.delenv(name, raising=False)
    config_dir = tmp_path / "config"
    monkeypatch.setenv("CAIRN_CONFIG_DIR", str(config_dir))
    monkeypatch.setenv("CAIRN_STATE_DIR", str(tmp_path / "state"))
    yield config_dir


@pytest.fixture
def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port

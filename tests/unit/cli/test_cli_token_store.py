from __future__ import annotations

import stat
from pathlib import Path

import pytest

from cairn.client.token_store import AUTH_FILE_NAME, TokenStore, default_config_dir


def test_round_trip_keyed_by_master(tmp_path: Path) -> None:
    store = TokenStore(tmp_path / "cairn" / AUTH_FILE_NAME)
    assert store.active_token("localhost:8090") is None

    store.save_login("localhost:8090", "determined", "tok-1")
    store.save_login("localhost:8090", "admin", "tok-2")
    store.save_login("other:8090", "determined", "tok-3")

    fresh = TokenStore(store.path)  # another process reading the same file
    assert fresh.active_token("localhost:8090") == ("admin", "tok-2")
    assert fresh.token("localhost:8090", "determined") == "tok-1"
    assert fresh.active_token("other:8090") == ("determined", "tok-3")

    assert fresh.forget("localhost:8090", "admin")
    assert fresh.active_user("localhost:8090") is None
    assert fresh.token("localhost:8090", "determined") == "tok-1"
    assert not fresh.forget("localhost:8090", "admin")


def test_file_is_private(tmp_path: Path) -> None:
    store = TokenStore(tmp_path / "cairn" / AUTH_FILE_NAME)
    store.save_login("localhost:8090", "determined", "secret")
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.path.parent.stat().st_mode) == 0o700
    store.save_login("localhost:8090", "determined", "secret-2")
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600


def test_damaged_file_reads_as_empty_and_is_rewritten(tmp_path: Path) -> None:
    path = tmp_path / AUTH_FILE_NAME
    path.write_text("{not json")
    store = TokenStore(path)
    assert store.active_token("localhost:8090") is None
    store.save_login("localhost:8090", "determined", "tok")
    assert TokenStore(path).active_token("localhost:8090") == ("determined", "tok")


def test_config_dir_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert default_config_dir({"CAIRN_CONFIG_DIR": str(tmp_path / "x")}) == tmp_path / "x"
    assert default_config_dir({"XDG_CONFIG_HOME": str(tmp_path / "xdg")}) == tmp_path / "xdg" / "cairn"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_config_dir({}) == tmp_path / "home" / ".config" / "cairn"

"""The login cache: one session token per (master, user) and the active user of each master.

Kept in $CAIRN_CONFIG_DIR/auth.json, else $XDG_CONFIG_HOME/cairn/auth.json, else
~/.config/cairn/auth.json, readable by its owner only (it holds bearer tokens).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CONFIG_DIR_ENV = "CAIRN_CONFIG_DIR"
AUTH_FILE_NAME = "auth.json"
_FORMAT_VERSION = 1


def default_config_dir(env: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if env is None else env
    if environ.get(CONFIG_DIR_ENV):
        return Path(environ[CONFIG_DIR_ENV]).expanduser()
    xdg = environ.get("XDG_CONFIG_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".config"
    return base / "cairn"


def write_private_file(path: Path, text: str) -> None:
    """Replace `path` atomically with a file only its owner can read."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise


class TokenStore:
    """Reads the file on every call, so several cairn processes see each other's logins."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def default(cls, env: Mapping[str, str] | None = None) -> TokenStore:
        return cls(default_config_dir(env) / AUTH_FILE_NAME)

    def _load(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            data = None
        except (OSError, ValueError):
            # A damaged cache only costs a fresh login; it is rewritten on the next one.
            data = None
        if not isinstance(data, dict) or not isinstance(data.get("masters"), dict):
            return {"version": _FORMAT_VERSION, "masters": {}}
        return data

    def _save(self, data: dict[str, Any]) -> None:
        write_private_file(self.path, json.dumps(data, indent=2, sort_keys=True) + "\n")

    def _entry(self, data: dict[str, Any], master: str) -> dict[str, Any]:
        entry = data["masters"].get(master)
        if not isinstance(entry, dict) or not isinstance(entry.get("tokens"), dict):
            entry = {"active_user": None, "tokens": {}}
            data["masters"][master] = entry
        return entry

    def active_user(self, master: str) -> str | None:
        entry = self._load()["masters"].get(master)
        user = entry.get("active_user") if isinstance(entry, dict) else None
        return user if isinstance(user, str) and user else None

    def token(self, master: str, username: str) -> str | None:
        entry = self._load()["masters"].get(master)
        tokens = entry.get("tokens") if isinstance(entry, dict) else None
        token = tokens.get(username) if isinstance(tokens, dict) else None
        return token if isinstance(token, str) and token else None

    def active_token(self, master: str) -> tuple[str, str] | None:
        """(username, token) of the active user of `master`, when one is logged in."""
        user = self.active_user(master)
        if user is None:
            return None
        token = self.token(master, user)
        return (user, token) if token else None

    def save_login(self, master: str, username: str, token: str) -> None:
        data = self._load()
        entry = self._entry(data, master)
        entry["tokens"][username] = token
        entry["active_user"] = username
        self._save(data)

    def forget(self, master: str, username: str) -> bool:
        """Drop the user's token (and the active user when it is them); True if there was one."""
        data = self._load()
        entry = self._entry(data, master)
        had = entry["tokens"].pop(username, None) is not None
        if entry.get("active_user") == username:
            entry["active_user"] = None
        self._save(data)
        return had

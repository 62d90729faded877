"""Small JSON files written atomically, so a reader (or a restarted agent) never sees half of one."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, sort_keys=True))
    tmp.replace(path)


def read_json(path: Path) -> dict[str, Any] | None:
    """The object in `path`, or None when the file is missing or not a JSON object."""
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None

"""The key webhook posts are signed with: the operator's (`webhooks.signing_key`, a flag or an
environment variable), or else one generated on the first start and kept in the state directory,
so that receivers can keep checking signatures across restarts (Determined generates one too)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from services.master.configuration.settings import Settings

KEY_FILE = "webhooks_signing_key"


def signing_key(settings: Settings) -> str:
    if settings.webhook_signing_key:
        return settings.webhook_signing_key
    path = Path(settings.state_dir) / KEY_FILE
    try:
        kept = path.read_text().strip()
    except FileNotFoundError:
        kept = ""
    if kept:
        return kept
    key = secrets.token_hex(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Created owner-only and never replaced: of two masters starting at once one writes it.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip() or key
    with os.fdopen(fd, "w") as f:
        f.write(key + "\n")
    return key

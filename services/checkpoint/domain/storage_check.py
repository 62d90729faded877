"""Whether a storage configuration is usable: valid, there (or creatable), and writable."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from services.checkpoint.domain.storage_managers import StorageManagers
from services.common.logging import get_logger

log = get_logger(__name__)


@dataclass(frozen=True)
class StorageCheck:
    ok: bool
    error: str = ""


def check_storage(managers: StorageManagers, section: Mapping[str, Any] | None) -> StorageCheck:
    """Writes and removes a probe file. Every failure, a bad config included, is an answer."""
    try:
        manager = managers.get(section)
        manager.check_writable()
    except Exception as exc:
        # Any failure is what the caller asked to learn about, so it is the answer, not an error.
        log.info("storage check failed", error=str(exc), error_type=type(exc).__name__)
        return StorageCheck(ok=False, error=str(exc) or type(exc).__name__)
    return StorageCheck(ok=True)

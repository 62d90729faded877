"""StorageManagers by configuration, reused between calls: the configuration travels with every
call, but building an S3 client each time would cost more than most calls themselves."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from cairn.storage import StorageManager, storage_manager_from_config

DEFAULT_CAPACITY = 32


class StorageManagers:
    def __init__(
        self,
        capacity: int = DEFAULT_CAPACITY,
        build: Callable[[Mapping[str, Any] | None], StorageManager] = storage_manager_from_config,
    ) -> None:
        self._capacity = capacity
        self._build = build
        self._lock = threading.Lock()
        self._managers: OrderedDict[str, StorageManager] = OrderedDict()

    def get(self, section: Mapping[str, Any] | None) -> StorageManager:
        """The manager for a `checkpoint_storage` section; raises StorageConfigError when invalid."""
        key = json.dumps(section, sort_keys=True, default=str)
        with self._lock:
            manager = self._managers.get(key)
            if manager is not None:
                self._managers.move_to_end(key)
                return manager
        manager = self._build(section)
        with self._lock:
            self._managers[key] = manager
            self._managers.move_to_end(key)
            while len(self._managers) > self._capacity:
                self._managers.popitem(last=False)
        return manager

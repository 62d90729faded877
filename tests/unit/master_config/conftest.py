"""Shared fixtures for the experiment-configuration tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from services.master.domain.config import ConfigDefaults, parse_config_text, validate_config

MASTER_STORAGE: dict[str, Any] = {"type": "shared_fs", "host_path": "/var/lib/cairn/checkpoints"}


@pytest.fixture
def defaults() -> ConfigDefaults:
    return ConfigDefaults(
        checkpoint_storage=dict(MASTER_STORAGE), resource_pool="default", experiment_seed=1234
    )


@pytest.fixture
def problems_of() -> Callable[[str], list[str]]:
    """The problems validate_config reports for a YAML text."""

    def problems(text: str) -> list[str]:
        return validate_config(parse_config_text(text))

    return problems

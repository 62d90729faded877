"""`--config KEY=VALUE` options, as Determined's CLI takes them: dotted keys name nested fields
(`searcher.max_length.batches=200`), values are read as YAML (`4` is a number, `[a, b]` a list)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import click
import yaml


def apply_overrides(config: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """`config` with each KEY=VALUE set in it (a new mapping; later options win)."""
    result = dict(config)
    for item in overrides:
        key, sep, text = item.partition("=")
        path = key.strip().split(".")
        if not sep or not all(path):
            raise click.BadParameter(
                f"expected KEY=VALUE with a dotted KEY, got {item!r}", param_hint="--config"
            )
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise click.BadParameter(f"{key}: the value is not YAML ({exc})", param_hint="--config") from None
        node = result
        for part in path[:-1]:
            child = node.get(part)
            node[part] = child = dict(child) if isinstance(child, dict) else {}
            node = child
        node[path[-1]] = value
    return result

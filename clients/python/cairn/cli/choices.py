"""Command-line spellings of proto enums: `--state stopping-canceled`, `--sort start-time`.

Enums are typed `Any` here: mypy-protobuf gives each enum its own wrapper class, with a value type
that plain ints do not satisfy, and these helpers serve all of them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import click


def cli_name(enum_name: str, prefix: str) -> str:
    """STATE_STOPPING_CANCELED -> stopping-canceled."""
    return enum_name.removeprefix(prefix).lower().replace("_", "-")


def enum_choices(enum: Any, prefix: str, skip: Iterable[str] = ("UNSPECIFIED",)) -> list[str]:
    skipped = {f"{prefix}{name}" for name in skip}
    names: list[str] = list(enum.keys())
    return [cli_name(name, prefix) for name in names if name not in skipped]


def parse_enum(enum: Any, prefix: str, text: str, option: str) -> Any:
    """Accept "stopping-canceled", "STOPPING_CANCELED" or "STATE_STOPPING_CANCELED"."""
    normalised = text.strip().upper().replace("-", "_")
    if not normalised.startswith(prefix):
        normalised = prefix + normalised
    try:
        return enum.Value(normalised)
    except ValueError:
        valid = ", ".join(enum_choices(enum, prefix))
        raise click.BadParameter(f"{text!r} is not one of: {valid}", param_hint=option) from None

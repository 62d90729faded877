"""How commands print: rich tables for people, protobuf JSON (lowerCamelCase) for machines."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import click
from google.protobuf import json_format
from google.protobuf.message import Message
from google.protobuf.struct_pb2 import Struct
from google.protobuf.timestamp_pb2 import Timestamp
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from cairn.printable import printable
from cairn.wire import struct_to_python

# Wide enough that tables piped to a file or a test are not wrapped into unreadable columns.
_PIPE_WIDTH = 200


def console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    is_tty = stream.isatty()
    return Console(
        stderr=stderr,
        width=None if is_tty else _PIPE_WIDTH,
        highlight=False,
        markup=False,
        emoji=False,
        soft_wrap=not is_tty,
    )


# ---- JSON ----


def message_to_dict(message: Message) -> dict[str, Any]:
    """Field names in lowerCamelCase, enums as names, defaults included (like Determined's REST)."""
    return json_format.MessageToDict(message, always_print_fields_with_no_presence=True)


def print_json(value: Message | dict[str, Any] | list[Any]) -> None:
    data = message_to_dict(value) if isinstance(value, Message) else value
    click.echo(json.dumps(data, indent=2))


def print_json_line(message: Message) -> None:
    """One compact object per line, for streams (NDJSON)."""
    click.echo(json.dumps(message_to_dict(message), separators=(",", ":")))


# ---- tables ----


def build_table(columns: Sequence[str], rows: Iterable[Sequence[str]], title: str | None = None) -> Table:
    table = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left", pad_edge=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        # Text cells: values such as "[1, 2]" must not be read as rich markup.
        table.add_row(*(Text(printable(cell)) for cell in row))
    return table


def key_value_table(pairs: Iterable[tuple[str, str]]) -> Table:
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column("key", style="bold")
    table.add_column("value", overflow="fold")
    for key, value in pairs:
        table.add_row(Text(printable(key)), Text(printable(value)))
    return table


def print_renderable(renderable: Any) -> None:
    console().print(renderable)


# ---- cell formatting ----


def enum_label(name: str, prefix: str = "STATE_") -> str:
    """STATE_STOPPING_CANCELED -> STOPPING_CANCELED; UNSPECIFIED -> ""."""
    label = name[len(prefix) :] if name.startswith(prefix) else name
    return "" if label == "UNSPECIFIED" else label


def timestamp_text(ts: Timestamp | None) -> str:
    if ts is None or (ts.seconds == 0 and ts.nanos == 0):
        return ""
    moment = datetime.fromtimestamp(ts.seconds + ts.nanos / 1e9, tz=UTC).astimezone()
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def percent_text(fraction: float | None) -> str:
    if fraction is None:
        return ""
    return f"{fraction * 100:.1f}%"


def metric_text(value: float | None) -> str:
    if value is None or math.isnan(value):
        return ""
    return f"{value:.6g}"


def bytes_text(size: int) -> str:
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    amount = float(size)
    for unit in units:
        if amount < 1024 or unit == units[-1]:
            return f"{int(amount)} {unit}" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    return f"{size} B"


def duration_text(seconds: float) -> str:
    if seconds <= 0:
        return ""
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def struct_to_dict(value: Struct) -> dict[str, Any]:
    return struct_to_python(value)


def _scalar_text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, float):
        # Sampled values carry 16 digits nobody reads; five significant ones tell them apart.
        return f"{value:.5g}"
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"optimizer": {"lr": 0.1}} -> {"optimizer.lr": 0.1}, for one-line display of nested hparams."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def mapping_text(data: dict[str, Any]) -> str:
    """Compact one-line form such as `layers=3, lr=0.1`: nested keys dotted, sorted (a Struct
    keeps no order)."""
    return ", ".join(f"{key}={_scalar_text(value)}" for key, value in sorted(flatten(data).items()))


def bool_text(value: bool) -> str:
    return "yes" if value else "no"

"""Checks every request gets before its handler runs.

NUL characters: PostgreSQL refuses them in text, so a request carrying one would fail deep in a
query with an unhelpful error; it is refused up front instead, naming the field.
"""

from __future__ import annotations

from google.protobuf.message import Message

_MAX_DEPTH = 32


def _bad_string(value: str) -> bool:
    return "\x00" in value


def nul_field(message: Message, prefix: str = "", depth: int = 0) -> str | None:
    """The path of the first string field holding a NUL character, or None."""
    if depth > _MAX_DEPTH:
        return None
    for field, value in message.ListFields():
        path = f"{prefix}{field.name}"
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            for key, item in value.items():
                if isinstance(key, str) and _bad_string(key):
                    return f"{path} (a key)"
                if value_field.message_type is not None:
                    found = nul_field(item, f"{path}[{key!r}].", depth + 1)
                    if found:
                        return found
                elif isinstance(item, str) and _bad_string(item):
                    return f"{path}[{key!r}]"
            continue
        repeated = field.is_repeated
        items = list(value) if repeated else [value]
        for index, item in enumerate(items):
            where = f"{path}[{index}]" if repeated else path
            if isinstance(item, Message):
                found = nul_field(item, f"{where}.", depth + 1)
                if found:
                    return found
            elif isinstance(item, str) and _bad_string(item):
                return where
    return None

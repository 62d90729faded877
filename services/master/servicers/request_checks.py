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
    """The path of the first string field holding a NUL character, or None. Every request passes
    through here, large metric batches too: the walk builds no path until it finds a NUL."""
    found = _first_nul(message, depth)
    if found is None:
        return None
    return prefix + "".join(reversed(found))


def _first_nul(message: Message, depth: int) -> list[str] | None:
    """The path to the first NUL, as segments from the innermost out; None when there is none."""
    if depth > _MAX_DEPTH:
        return None
    for field, value in message.ListFields():
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            for key, item in value.items():
                if isinstance(key, str) and _bad_string(key):
                    return [f"{field.name} (a key)"]
                if value_field.message_type is not None:
                    inner = _first_nul(item, depth + 1)
                    if inner is not None:
                        return [*inner, f"{field.name}[{key!r}]."]
                elif isinstance(item, str) and _bad_string(item):
                    return [f"{field.name}[{key!r}]"]
            continue
        if field.is_repeated:
            for index, item in enumerate(value):
                if isinstance(item, Message):
                    inner = _first_nul(item, depth + 1)
                    if inner is not None:
                        return [*inner, f"{field.name}[{index}]."]
                elif isinstance(item, str) and _bad_string(item):
                    return [f"{field.name}[{index}]"]
        elif isinstance(value, Message):
            inner = _first_nul(value, depth + 1)
            if inner is not None:
                return [*inner, f"{field.name}."]
        elif isinstance(value, str) and _bad_string(value):
            return [field.name]
    return None

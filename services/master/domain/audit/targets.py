"""The objects a call named, stored as one searchable text: ` key=value key=value ` with a leading
and a trailing space, each value escaped so it holds no space, `=` or `%`, and a repeated field's
values as one token each. A filter `key=value` is then one LIKE on a whole token
(`% key=value %`), the same on SQLite and PostgreSQL, with no JSON functions; what is shown joins
a key's values with commas again."""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import quote, unquote

# The column's size; tokens that would pass it are left out and counted in `more=N`.
MAX_TEXT = 2048
MORE_KEY = "more"


_SAFE = "!#$&'()*+,-./:;<>?@[]^_`{|}~"
# What needs no escape, checked first: ids and names mostly are (quote() costs ten times more).
_PLAIN = re.compile(r"[A-Za-z0-9!#$&'()*+,\-./:;<>?@\[\]^_`{|}~]*")


def _escaped(text: str) -> str:
    # Everything but plain characters is %-escaped: spaces, '=', '%' and anything unprintable.
    return text if _PLAIN.fullmatch(text) else quote(text, safe=_SAFE)


def encode(pairs: Iterable[tuple[str, str]]) -> str:
    """The stored text of (key, value) pairs, in their order, within MAX_TEXT."""
    tokens: list[str] = []
    size = 1
    left_out = 0
    for key, value in pairs:
        token = f"{_escaped(key)}={_escaped(value)}"
        # Room is kept for the `more=N` token that may follow.
        if size + len(token) + 1 > MAX_TEXT - 16:
            left_out += 1
            continue
        tokens.append(token)
        size += len(token) + 1
    if left_out:
        tokens.append(f"{MORE_KEY}={left_out}")
    return f" {' '.join(tokens)} " if tokens else ""


def decode(text: str) -> dict[str, str]:
    """key -> value (a repeated key's values joined by commas), in their stored order."""
    shown: dict[str, list[str]] = {}
    for token in text.split():
        key, _, value = token.partition("=")
        shown.setdefault(unquote(key), []).append(unquote(value))
    return {key: ",".join(values) for key, values in shown.items()}


def filter_pattern(key_value: str) -> str | None:
    """The LIKE pattern (escape character `\\`) matching stored texts that hold the token
    `key=value`; None when `key_value` is not of that form."""
    key, sep, value = key_value.strip().partition("=")
    if not sep or not key.strip() or not value.strip():
        return None
    token = f"{_escaped(key.strip())}={_escaped(value.strip())}"
    # LIKE's own wildcards, taken literally: the escapes' '%' and a name's '_'.
    token = token.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"% {token} %"

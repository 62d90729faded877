"""Text from other users (names, descriptions, usernames) shown to a person as what it is.

A name may hold characters that act on a terminal instead of showing: ANSI escapes (ESC, a C0
control) that restyle, move the cursor or retitle the window; newlines and carriage returns that
forge whole lines (of a table, of a log); bidi overrides and isolates that reorder what follows
(U+202E shows "exe.txt" as "txt.exe"); zero-width characters that hide differences. Wherever such
text is printed (the `cairn` CLI, the services' logs) it goes through `printable`, which escapes
them as Python writes them (\\n, \\x1b, \\u202e). A typed backslash stays: it shows as itself.
"""

from __future__ import annotations

import unicodedata

# Controls (C0 with ESC, DEL, C1), format characters (bidi overrides and isolates, zero-width
# characters), line and paragraph separators.
_UNPRINTABLE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    named = _NAMED_ESCAPES.get(char)
    if named is not None:
        return named
    if unicodedata.category(char) not in _UNPRINTABLE_CATEGORIES:
        return char
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: str) -> str:
    """`text` with every character that could reorder, hide or restyle what is shown escaped."""
    if text.isprintable():
        return text
    return "".join(_escape(char) for char in text)


def printable_lines(text: str) -> str:
    """As `printable`, keeping the line breaks of a message that is meant to span lines (an
    error's explanation) while escaping everything else in each line."""
    return "\n".join(printable(line) for line in text.split("\n"))

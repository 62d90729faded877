"""Turning a command's output bytes into log lines.

Splitting: a line ends at "\n", at "\r" (progress bars such as tqdm redraw with a bare carriage
return, and each redraw is worth a line) or at "\r\n" (one break, not two). A line longer than
MAX_LINE_BYTES is cut into pieces. Bytes are decoded as UTF-8; invalid bytes become U+FFFD.

Parsing, in this order, both optional:
  * a rank prefix exactly as Determined's launchers write it, "[rank=N] ": removed from the message,
    N becomes the line's rank;
  * a level word at the start of what remains: one of TRACE DEBUG INFO WARN WARNING ERROR CRITICAL
    FATAL, upper case only (so prose such as "info: ..." is not taken for a level), optionally in
    square brackets, followed by ":", a space, "]" or the end of the line. This covers Python's
    default logging format ("INFO:root:..."), "WARNING something" and "[ERROR] ...". WARN is
    reported as WARNING and FATAL as CRITICAL. The level word stays in the message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_LINE_BYTES = 64 * 1024

_RANK_PREFIX = re.compile(r"^\[rank=(\d{1,6})\] ?")
_LEVEL_WORD = re.compile(r"^\s*\[?(TRACE|DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)(?=[:\s\]]|$)")
_LINE_BREAK = re.compile(rb"\r\n|\r|\n")
_LEVEL_ALIASES = {"WARN": "WARNING", "FATAL": "CRITICAL"}


@dataclass(frozen=True)
class ParsedLine:
    message: str
    rank: int | None
    level: str


def parse_line(text: str) -> ParsedLine:
    rank: int | None = None
    match = _RANK_PREFIX.match(text)
    if match:
        rank = int(match.group(1))
        text = text[match.end() :]
    level = ""
    found = _LEVEL_WORD.match(text)
    if found:
        word = found.group(1)
        level = _LEVEL_ALIASES.get(word, word)
    return ParsedLine(message=text, rank=rank, level=level)


class LineSplitter:
    """Feed it chunks as they are read; it returns the lines they complete."""

    def __init__(self, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self._buffer = bytearray()
        self._max = max_line_bytes
        # The previous chunk ended in "\r": a "\n" opening the next one belongs to that break.
        self._after_cr = False

    def feed(self, chunk: bytes) -> list[str]:
        lines: list[str] = []
        if self._after_cr and chunk[:1] == b"\n":
            chunk = chunk[1:]
        self._after_cr = False
        pos = 0
        for brk in _LINE_BREAK.finditer(chunk):
            self._append(chunk[pos : brk.start()], lines)
            lines.append(self._take())
            pos = brk.end()
            self._after_cr = brk.group() == b"\r" and pos == len(chunk)
        self._append(chunk[pos:], lines)
        return lines

    def _append(self, data: bytes, lines: list[str]) -> None:
        self._buffer += data
        while len(self._buffer) > self._max:
            piece = bytes(self._buffer[: self._max])
            del self._buffer[: self._max]
            lines.append(piece.decode("utf-8", "replace"))

    def flush(self) -> list[str]:
        """What is left when the stream ends: a last line without a line break."""
        if not self._buffer:
            return []
        return [self._take()]

    def _take(self) -> str:
        text = self._buffer.decode("utf-8", "replace")
        self._buffer.clear()
        return text

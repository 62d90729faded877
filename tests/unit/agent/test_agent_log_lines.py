"""Splitting a command's output into lines and reading rank and level from them."""

from __future__ import annotations

import pytest

from services.agent.runtime.log_lines import LineSplitter, parse_line


def split(*chunks: bytes, max_line: int = 64 * 1024) -> list[str]:
    splitter = LineSplitter(max_line)
    lines: list[str] = []
    for chunk in chunks:
        lines += splitter.feed(chunk)
    return lines + splitter.flush()


def test_lines_end_at_newline_carriage_return_or_both() -> None:
    assert split(b"a\nb\rc\r\nd") == ["a", "b", "c", "d"]


def test_crlf_split_across_chunks_is_one_break() -> None:
    assert split(b"a\r", b"\nb\n") == ["a", "b"]


def test_progress_bar_redraws_become_lines() -> None:
    assert split(b" 10%|#  |\r 50%|### |\r100%|####|\n") == [" 10%|#  |", " 50%|### |", "100%|####|"]


def test_blank_lines_are_kept_and_a_last_line_without_break_is_flushed() -> None:
    assert split(b"a\n\nb") == ["a", "", "b"]
    assert split(b"") == []


def test_partial_lines_wait_for_their_end() -> None:
    splitter = LineSplitter()
    assert splitter.feed(b"hel") == []
    assert splitter.feed(b"lo\nwor") == ["hello"]
    assert splitter.flush() == ["wor"]


def test_invalid_utf8_is_replaced_not_fatal() -> None:
    assert split(b"caf\xc3\xa9 \xff\n") == ["café \ufffd"]


def test_overlong_lines_are_cut() -> None:
    assert split(b"x" * 25 + b"\n", max_line=10) == ["x" * 10, "x" * 10, "x" * 5]
    assert split(b"x" * 10 + b"\n" + b"y" * 12, max_line=10) == ["x" * 10, "y" * 10, "yy"]
    assert split(b"x" * 7, b"x" * 7 + b"\n", max_line=10) == ["x" * 10, "x" * 4]


@pytest.mark.parametrize(
    ("text", "rank", "level", "message"),
    [
        ("[rank=3] INFO: step 5", 3, "INFO", "INFO: step 5"),
        ("INFO:root:hello", None, "INFO", "INFO:root:hello"),
        ("WARNING something odd", None, "WARNING", "WARNING something odd"),
        ("WARN: short form", None, "WARNING", "WARN: short form"),
        ("[ERROR] it broke", None, "ERROR", "[ERROR] it broke"),
        ("  CRITICAL", None, "CRITICAL", "  CRITICAL"),
        ("FATAL: gone", None, "CRITICAL", "FATAL: gone"),
        ("[rank=0] plain text", 0, "", "plain text"),
        ("info: lower case is prose", None, "", "info: lower case is prose"),
        ("INFORMATION is not a level", None, "", "INFORMATION is not a level"),
        ("Epoch 1 INFO inside", None, "", "Epoch 1 INFO inside"),
    ],
)
def test_rank_and_level(text: str, rank: int | None, level: str, message: str) -> None:
    parsed = parse_line(text)
    assert (parsed.rank, parsed.level, parsed.message) == (rank, level, message)

from __future__ import annotations

from pathlib import Path

import pytest

from cairn.client.ignore_rules import IgnoreRules, compile_rule


def ignored(rules: str, path: str, is_dir: bool = False) -> bool:
    return IgnoreRules.parse(rules).is_ignored(path, is_dir)


def test_blank_lines_and_comments_are_not_rules() -> None:
    assert compile_rule("") is None
    assert compile_rule("   ") is None
    assert compile_rule("# a comment") is None
    assert not IgnoreRules.parse("\n# only comments\n")


@pytest.mark.parametrize(
    ("rules", "path", "expected"),
    [
        ("*.pyc", "a.pyc", True),
        ("*.pyc", "pkg/sub/a.pyc", True),
        ("*.pyc", "a.py", False),
        ("data", "data", True),
        ("data", "sub/data", True),
        ("/data", "data", True),
        ("/data", "sub/data", False),
        ("docs/*.md", "docs/a.md", True),
        ("docs/*.md", "x/docs/a.md", False),
        ("docs/*.md", "docs/sub/a.md", False),
        ("**/logs", "logs", True),
        ("**/logs", "a/b/logs", True),
        ("logs/**", "logs/a/b.txt", True),
        ("logs/**", "logs", False),
        ("a/**/b", "a/b", True),
        ("a/**/b", "a/x/y/b", True),
        ("a/**/b", "c/a/x/b", False),
        ("file?.txt", "file1.txt", True),
        ("file?.txt", "file10.txt", False),
        ("file[0-9].txt", "file7.txt", True),
        ("file[!0-9].txt", "file7.txt", False),
        ("file[!0-9].txt", "filex.txt", True),
        ("\\#literal", "#literal", True),
        ("\\!bang", "!bang", True),
        ("weird[", "weird[", True),
        ("*.ckpt", "checkpoints/model.ckpt", True),
    ],
)
def test_glob_matching(rules: str, path: str, expected: bool) -> None:
    assert ignored(rules, path) is expected


def test_trailing_slash_matches_directories_only() -> None:
    assert ignored("build/", "build", is_dir=True)
    assert ignored("build/", "src/build", is_dir=True)
    assert not ignored("build/", "build", is_dir=False)


def test_negation_last_matching_rule_wins() -> None:
    rules = "*.log\n!keep.log\n"
    assert ignored(rules, "debug.log")
    assert not ignored(rules, "keep.log")
    assert not ignored(rules, "sub/keep.log")
    # A later rule ignores it again.
    assert ignored(rules + "keep.log\n", "keep.log")


def test_negation_with_anchoring() -> None:
    rules = "*.csv\n!/small.csv\n"
    assert not ignored(rules, "small.csv")
    assert ignored(rules, "data/small.csv")


def test_trailing_whitespace_is_trimmed_unless_escaped() -> None:
    assert ignored("notes.txt   ", "notes.txt")
    assert ignored("space\\ ", "space ")


def test_reads_detignore_then_cairnignore(tmp_path: Path) -> None:
    (tmp_path / ".detignore").write_text("*.bin\n")
    (tmp_path / ".cairnignore").write_text("!keep.bin\n")
    rules = IgnoreRules.from_directory(tmp_path)
    assert rules.is_ignored("weights.bin", False)
    assert not rules.is_ignored("keep.bin", False)


def test_no_ignore_files_means_no_rules(tmp_path: Path) -> None:
    assert not IgnoreRules.from_directory(tmp_path)

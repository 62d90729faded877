"""gitignore-style rules for what to leave out of a model definition (.detignore / .cairnignore).

Supported: comments (#), blank lines, globs (* ? [...]), ** (any number of directories), a trailing
"/" (directories only), a leading or inner "/" (anchored at the context root; otherwise a pattern
matches at any depth), "!" (negation: the last matching rule wins) and backslash escapes. As in git,
a file inside an ignored directory cannot be re-included, because the walker never enters it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

IGNORE_FILE_NAMES = (".detignore", ".cairnignore")


@dataclass(frozen=True)
class IgnoreRule:
    pattern: str
    regex: re.Pattern[str]
    negate: bool
    directories_only: bool


def _char_class(glob: str, start: int) -> tuple[str, int] | None:
    """Translate the [...] starting at `start`; None when it is not closed (then "[" is literal)."""
    end = start + 1
    if end < len(glob) and glob[end] in "!^":
        end += 1
    if end < len(glob) and glob[end] == "]":
        end += 1
    while end < len(glob) and glob[end] != "]":
        end += 1
    if end >= len(glob):
        return None
    body = glob[start + 1 : end]
    negated = body[:1] in ("!", "^")
    if negated:
        body = body[1:]
    escaped = "".join("\\" + ch if ch in "\\[]&~|^" else ch for ch in body)
    return ("[^/" + escaped + "]" if negated else "[" + escaped + "]"), end + 1


def _glob_to_regex(glob: str) -> str:
    out: list[str] = []
    i = 0
    n = len(glob)
    while i < n:
        ch = glob[i]
        if ch == "\\" and i + 1 < n:
            out.append(re.escape(glob[i + 1]))
            i += 2
        elif ch == "*":
            run_end = i
            while run_end < n and glob[run_end] == "*":
                run_end += 1
            whole_segment = (i == 0 or glob[i - 1] == "/") and (run_end == n or glob[run_end] == "/")
            if run_end - i >= 2 and whole_segment:
                if run_end == n:
                    out.append(".*")  # "dir/**": everything inside
                    i = run_end
                else:
                    out.append("(?:.*/)?")  # "**/" : zero or more directories
                    i = run_end + 1
            else:
                out.append("[^/]*")
                i = run_end
        elif ch == "?":
            out.append("[^/]")
            i += 1
        elif ch == "[":
            translated = _char_class(glob, i)
            if translated is None:
                out.append(re.escape(ch))
                i += 1
            else:
                out.append(translated[0])
                i = translated[1]
        else:
            out.append(re.escape(ch))
            i += 1
    return "".join(out)


def _strip_trailing_spaces(line: str) -> str:
    stripped = line.rstrip(" \t")
    # "foo\ " keeps its escaped space.
    if stripped.endswith("\\") and len(stripped) < len(line):
        return stripped + line[len(stripped)]
    return stripped


def compile_rule(line: str) -> IgnoreRule | None:
    """One line of an ignore file as a rule; None for blanks and comments."""
    text = _strip_trailing_spaces(line.rstrip("\r\n"))
    if not text or text.startswith("#"):
        return None
    negate = text.startswith("!")
    if negate or text.startswith(("\\!", "\\#")):
        text = text[1:]
    directories_only = text.endswith("/")
    text = text.rstrip("/")
    if not text:
        return None
    anchored = "/" in text
    if text.startswith("/"):
        text = text[1:]
    prefix = "" if anchored else "(?:.*/)?"
    regex = re.compile(f"^{prefix}{_glob_to_regex(text)}$", re.DOTALL)
    return IgnoreRule(pattern=line.strip(), regex=regex, negate=negate, directories_only=directories_only)


class IgnoreRules:
    def __init__(self, rules: Iterable[IgnoreRule] = ()) -> None:
        self.rules = list(rules)

    @classmethod
    def parse(cls, text: str) -> IgnoreRules:
        compiled = (compile_rule(line) for line in text.splitlines())
        return cls(rule for rule in compiled if rule is not None)

    @classmethod
    def from_directory(cls, root: Path) -> IgnoreRules:
        """The rules of the root's .detignore followed by its .cairnignore (either may be absent)."""
        texts = []
        for name in IGNORE_FILE_NAMES:
            candidate = root / name
            if candidate.is_file():
                texts.append(candidate.read_text(encoding="utf-8", errors="replace"))
        return cls.parse("\n".join(texts))

    def __bool__(self) -> bool:
        return bool(self.rules)

    def is_ignored(self, relative_path: str, is_dir: bool) -> bool:
        """`relative_path` uses "/" and is relative to the context root."""
        ignored = False
        for rule in self.rules:
            if rule.directories_only and not is_dir:
                continue
            if rule.regex.match(relative_path):
                ignored = not rule.negate
        return ignored

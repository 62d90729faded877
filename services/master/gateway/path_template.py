"""google.api.http path templates: parsing, matching and how specific each one is.

Grammar (from google/api/http.proto):
    Template = "/" Segments [ Verb ] ;   Segments = Segment { "/" Segment } ;
    Segment  = "*" | "**" | LITERAL | Variable ;
    Variable = "{" FieldPath [ "=" Segments ] "}" ;   Verb = ":" LITERAL ;
`{id}` is short for `{id=*}`: exactly one path segment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

# Specificity rank of a segment: literals beat single-segment wildcards beat `**`.
LITERAL, ONE_SEGMENT, ANY_SEGMENTS = 0, 1, 2

_FIELD_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_LITERAL = re.compile(r"[^/{}*:]+")


class TemplateError(ValueError):
    pass


@dataclass(frozen=True)
class PathTemplate:
    text: str
    variables: tuple[str, ...]  # field paths, in order of appearance
    specificity: tuple[int, ...]  # one rank per segment; smaller sorts first
    _pattern: re.Pattern[str]

    def match(self, path: str) -> dict[str, str] | None:
        """The variables bound by `path` (its raw, still percent-encoded form), or None."""
        found = self._pattern.fullmatch(path)
        if found is None:
            return None
        return {field: unquote(found.group(f"v{i}")) for i, field in enumerate(self.variables)}


def _split_segments(text: str) -> list[str]:
    """Split at slashes outside braces: `a/{b=c/*}/d` → ['a', '{b=c/*}', 'd']."""
    segments: list[str] = []
    depth, start = 0, 0
    for i, char in enumerate(text):
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth < 0:
                raise TemplateError(f"unbalanced '}}' in {text!r}")
        elif char == "/" and depth == 0:
            segments.append(text[start:i])
            start = i + 1
    if depth != 0:
        raise TemplateError(f"unbalanced '{{' in {text!r}")
    segments.append(text[start:])
    return segments


def _plain_segment(segment: str, template: str) -> tuple[str, int]:
    """Regex and rank of a segment that is not a variable."""
    if segment == "*":
        return r"[^/]+", ONE_SEGMENT
    if segment == "**":
        return r"[^/]*(?:/[^/]*)*", ANY_SEGMENTS
    if not _LITERAL.fullmatch(segment):
        raise TemplateError(f"bad segment {segment!r} in {template!r}")
    return re.escape(segment), LITERAL


def parse_template(template: str) -> PathTemplate:
    if not template.startswith("/"):
        raise TemplateError(f"template must start with '/': {template!r}")
    body, verb = template[1:], ""
    closing = body.rfind("}")
    colon = body.rfind(":")
    if colon > closing:
        body, verb = body[:colon], body[colon + 1 :]
        if not _LITERAL.fullmatch(verb):
            raise TemplateError(f"bad verb in {template!r}")
    regex_parts: list[str] = []
    ranks: list[int] = []
    variables: list[str] = []
    for segment in _split_segments(body):
        if segment.startswith("{"):
            if not segment.endswith("}"):
                raise TemplateError(f"bad variable {segment!r} in {template!r}")
            field, _, sub = segment[1:-1].partition("=")
            if not _FIELD_PATH.fullmatch(field):
                raise TemplateError(f"bad field path {field!r} in {template!r}")
            if field in variables:
                raise TemplateError(f"{field!r} bound twice in {template!r}")
            inner: list[str] = []
            for part in (sub or "*").split("/"):
                pattern, rank = _plain_segment(part, template)
                inner.append(pattern)
                ranks.append(rank)
            regex_parts.append(f"(?P<v{len(variables)}>{'/'.join(inner)})")
            variables.append(field)
        else:
            pattern, rank = _plain_segment(segment, template)
            regex_parts.append(pattern)
            ranks.append(rank)
    regex = "/" + "/".join(regex_parts) + (":" + re.escape(verb) if verb else "")
    return PathTemplate(template, tuple(variables), tuple(ranks), re.compile(regex))

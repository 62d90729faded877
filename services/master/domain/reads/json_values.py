"""How a filter or a sort reads one value inside a JSON column (a run's hyperparameters, metadata
or summary metrics; an experiment's config), the same way on PostgreSQL and SQLite.

A value is read as a number only where it is a JSON number, as text only where it is a JSON string,
as a boolean only where it is true or false; anything else reads as NULL. So a filter that meets a
value of another type is no match, and a sort puts it with the missing ones, never a database error
(PostgreSQL refuses a cast of text to a number; Determined's own SQL fails there).

Keys are checked before any SQL is built: a path is a few keys of a bounded, plain character set,
which both databases' path syntax holds as is (PostgreSQL's text-array path, SQLite's quoted
`$."key"` path)."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import ColumnElement, case, func

from services.master.domain.kernel.errors import InvalidArgument

MAX_PATH = 8
# Letters, digits and `_ - . / :`: nothing either database's path syntax would read as syntax
# (PostgreSQL's array literal: braces, commas, quotes, blanks; SQLite's: quotes, backslashes).
_KEY = re.compile(r"^[A-Za-z0-9_\-./:]{1,255}$")

_PG_KINDS = {"number": ("number",), "string": ("string",), "boolean": ("boolean",)}
_SQLITE_KINDS = {"number": ("integer", "real"), "string": ("text",), "boolean": ("true", "false")}


def check_path(parts: list[str], where: str, shown: str, what: str) -> tuple[str, ...]:
    """`parts` as a JSON path, or InvalidArgument naming `where`, the name as given (`shown`) and
    what it should have been."""
    if not parts or len(parts) > MAX_PATH or not all(_KEY.match(part) for part in parts):
        raise InvalidArgument(
            f"{where}: {shown!r} is not {what} (at most {MAX_PATH} keys of letters, digits and _ - . / :)"
        )
    return tuple(parts)


def _sqlite_path(path: tuple[str, ...]) -> str:
    return "$" + "".join(f'."{key}"' for key in path)


def json_kind(column: Any, path: tuple[str, ...], dialect: str) -> ColumnElement[str]:
    """The JSON type of the value at `path`, as the database names it (NULL where there is none)."""
    if dialect == "postgresql":
        return func.json_typeof(column[path])
    return func.json_type(column, _sqlite_path(path))


def _is(kind: str, column: Any, path: tuple[str, ...], dialect: str) -> ColumnElement[bool]:
    names = (_PG_KINDS if dialect == "postgresql" else _SQLITE_KINDS)[kind]
    return json_kind(column, path, dialect).in_(names)


def json_number(column: Any, path: tuple[str, ...], dialect: str) -> ColumnElement[Any]:
    """The number at `path`; NULL where the value is missing or not a number."""
    return case((_is("number", column, path, dialect), column[path].as_float()), else_=None)


def json_text(column: Any, path: tuple[str, ...], dialect: str) -> ColumnElement[Any]:
    """The string at `path`; NULL where the value is missing or not a string."""
    return case((_is("string", column, path, dialect), column[path].as_string()), else_=None)


def json_boolean(column: Any, path: tuple[str, ...], dialect: str) -> ColumnElement[Any]:
    """'true' or 'false' for a boolean at `path`; NULL where the value is missing or not one."""
    kind = json_kind(column, path, dialect)
    if dialect == "postgresql":
        return case((kind == "boolean", column[path].as_string()), else_=None)
    return case((kind.in_(("true", "false")), kind), else_=None)


def json_present(column: Any, path: tuple[str, ...], dialect: str) -> ColumnElement[bool]:
    """Whether there is a value (other than JSON null) at `path`."""
    kind = json_kind(column, path, dialect)
    return kind.is_not(None) & (kind != "null")


def json_value(column: Any, path: tuple[str, ...], dialect: str, value: Any) -> ColumnElement[Any]:
    """The value at `path` read as the type of `value` (a filter's operand): a number, a boolean
    (as 'true'/'false') or text."""
    if isinstance(value, bool):
        return json_boolean(column, path, dialect)
    if isinstance(value, (int, float)):
        return json_number(column, path, dialect)
    return json_text(column, path, dialect)


def operand(value: Any) -> Any:
    """A filter's operand as json_value compares it: a boolean as its JSON text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value

"""Case-sensitive substring search that means the same on both databases. SQL's LIKE does not:
SQLite's ignores the case of ASCII letters, PostgreSQL's does not; and its % and _ must be escaped.
Determined's log search (`searchText`) is PostgreSQL's strpos: a literal, case-sensitive substring.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Integer
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement


class substring_position(FunctionElement[int]):
    """substring_position(text, part): where `part` first starts in `text` (1-based), 0 if nowhere."""

    type = Integer()
    inherit_cache = True


@compiles(substring_position)
def _strpos(element: substring_position, compiler: Any, **kw: Any) -> str:
    return f"strpos({compiler.process(element.clauses, **kw)})"


@compiles(substring_position, "sqlite")
def _instr(element: substring_position, compiler: Any, **kw: Any) -> str:
    return f"instr({compiler.process(element.clauses, **kw)})"

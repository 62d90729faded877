"""jsonschema's validation errors turned into the messages users read: "<field path>: <what is wrong>".

jsonschema words its errors for schema authors ("'x' is not of type 'integer'", "Additional
properties are not allowed"); these say what the field must be, name the field itself for missing
and unknown fields, and suggest the closest known key for a misspelt one.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from jsonschema import ValidationError

from services.master.domain.config.paths import child_path, format_path, problem

_TYPE_NAMES = {
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "boolean": "a boolean",
    "array": "a list",
    "object": "a mapping",
    "null": "null",
}

_BOUNDS = {
    "minimum": ">=",
    "maximum": "<=",
    "exclusiveMinimum": ">",
    "exclusiveMaximum": "<",
}


@dataclass(frozen=True)
class Problem:
    path: str
    text: str
    # A wrong type makes every other complaint about the same value noise.
    wrong_type: bool = False

    def render(self) -> str:
        return problem(self.path, self.text)


def _number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _type_text(expected: Any) -> str:
    names = [str(name) for name in (expected if isinstance(expected, list) else [expected])]
    return "must be " + " or ".join(_TYPE_NAMES.get(name, name) for name in names)


def _unknown_field(key: str, known: list[str]) -> str:
    close: list[str] = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return f"unknown field (did you mean '{close[0]}'?)" if close else "unknown field"


def _enum_text(error: ValidationError) -> str:
    explained = error.schema.get("x-value-messages", {}) if isinstance(error.schema, dict) else {}
    if isinstance(error.instance, str) and error.instance in explained:
        return f"'{error.instance}' {explained[error.instance]}"
    allowed: Any = error.validator_value
    choices = [str(choice) for choice in allowed if choice is not None]
    return "must be one of " + ", ".join(choices)


def _size_text(keyword: str, limit: int) -> str:
    if keyword == "minItems":
        return "must not be empty" if limit == 1 else f"must have at least {limit} items"
    if keyword == "maxItems":
        return f"must have at most {limit} items"
    if keyword == "minLength":
        return "must not be empty" if limit == 1 else f"must be at least {limit} characters long"
    if keyword == "maxLength":
        return f"must be at most {limit} characters long"
    if keyword == "minProperties":
        return f"must have at least {limit} fields"
    return f"must have at most {limit} fields"


def describe(error: ValidationError) -> list[Problem]:
    """The readable problems behind one jsonschema error (several for a multi-field error)."""
    path = format_path(error.absolute_path)
    keyword = str(error.validator)
    value: Any = error.validator_value
    schema: dict[str, Any] = error.schema if isinstance(error.schema, dict) else {}
    override = schema.get("x-messages", {}).get(keyword)

    if keyword == "required":
        present = error.instance if isinstance(error.instance, dict) else {}
        return [
            Problem(child_path(path, field), override or "required")
            for field in value
            if field not in present
        ]
    if keyword == "additionalProperties":
        known = sorted(schema.get("properties", {}))
        present = error.instance if isinstance(error.instance, dict) else {}
        return [
            Problem(child_path(path, str(key)), _unknown_field(str(key), known))
            for key in present
            if key not in known
        ]
    if override:
        return [Problem(path, override)]
    if keyword == "type":
        return [Problem(path, _type_text(value), wrong_type=True)]
    if keyword == "enum":
        return [Problem(path, _enum_text(error))]
    if keyword == "const":
        return [Problem(path, f"must be {value}")]
    if keyword in _BOUNDS:
        return [Problem(path, f"must be {_BOUNDS[keyword]} {_number(value)}")]
    if keyword in ("minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties"):
        return [Problem(path, _size_text(keyword, int(value)))]
    if keyword == "pattern":
        return [Problem(path, f"must match {value}")]
    return [Problem(path, error.message)]

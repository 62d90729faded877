"""Walking a configuration together with the schema parts that apply to each of its values.

Two passes use it: dropping explicit nulls from typed fields (Determined reads `field: null` as
"not given") before validation, and filling schema defaults during expansion. Both must follow the
same union dispatch as validation does (`$ref`, `allOf`, `if`/`then`/`else`), so the walk lives
here once.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

from jsonschema import Draft7Validator

from services.master.domain.config.schema import Schema

# Called with an object and one schema part that applies to it; may change the object in place.
ObjectVisitor = Callable[[dict[str, Any], Schema], None]


class SchemaWalker:
    def __init__(self, root: Schema) -> None:
        self._root = root
        self._validator = Draft7Validator(root)

    @property
    def root(self) -> Schema:
        return self._root

    def resolve(self, schema: Schema) -> Schema:
        """The schema a local `$ref` (#/definitions/<name>) points at, or the schema itself."""
        while "$ref" in schema:
            target: Any = self._root
            for part in schema["$ref"].removeprefix("#/").split("/"):
                target = target[part]
            schema = target
        return schema

    def _holds(self, condition: Schema, instance: Any) -> bool:
        return bool(self._validator.evolve(schema=condition).is_valid(instance))

    def applicable(self, schema: Schema, instance: Any) -> Iterator[Schema]:
        """Every schema part that constrains `instance` at this same location."""
        schema = self.resolve(schema)
        yield schema
        for member in schema.get("allOf", []):
            yield from self.applicable(member, instance)
        if "if" in schema:
            branch = schema.get("then") if self._holds(schema["if"], instance) else schema.get("else")
            if isinstance(branch, dict):
                yield from self.applicable(branch, instance)

    def _child_schemas(self, parts: list[Schema], key: str) -> list[Schema]:
        found: list[Schema] = []
        for part in parts:
            properties = part.get("properties", {})
            if key in properties:
                found.append(properties[key])
            elif isinstance(part.get("additionalProperties"), dict):
                found.append(part["additionalProperties"])
        return found

    def visit_objects(self, instance: Any, schema: Schema, visitor: ObjectVisitor) -> None:
        """Call `visitor` on every object in `instance` (outermost first) with each part that applies.

        The visitor runs before the walk descends, so values it adds are walked too; the applicable
        parts are computed again after it ran, so a condition it changes is honoured.
        """
        if isinstance(instance, dict):
            for part in list(self.applicable(schema, instance)):
                visitor(instance, part)
            parts = list(self.applicable(schema, instance))
            for key, value in instance.items():
                for child in self._child_schemas(parts, key):
                    self.visit_objects(value, child, visitor)
        elif isinstance(instance, list):
            for part in list(self.applicable(schema, instance)):
                items = part.get("items")
                if isinstance(items, dict):
                    for value in instance:
                        self.visit_objects(value, items, visitor)


def admits_null(walker: SchemaWalker, schema: Schema) -> bool:
    """Whether null is a value of its own for this field (an untyped `val`), not just "absent"."""
    resolved = walker.resolve(schema)
    if "type" in resolved:
        types = resolved["type"]
        return "null" in (types if isinstance(types, list) else [types])
    if "enum" in resolved:
        return None in resolved["enum"]
    return True


def drop_nulls(walker: SchemaWalker, config: dict[str, Any]) -> None:
    """Remove `field: null` wherever the field's type has no null, so it reads as not given."""

    def visitor(obj: dict[str, Any], part: Schema) -> None:
        for key, sub in part.get("properties", {}).items():
            if key in obj and obj[key] is None and not admits_null(walker, sub):
                del obj[key]

    walker.visit_objects(config, walker.root, visitor)


def fill_defaults(walker: SchemaWalker, instance: dict[str, Any], schema: Schema) -> None:
    """Give every absent field that has a schema default a copy of that default."""

    def visitor(obj: dict[str, Any], part: Schema) -> None:
        for key, sub in part.get("properties", {}).items():
            if key not in obj and "default" in sub:
                obj[key] = copy.deepcopy(sub["default"])

    walker.visit_objects(instance, schema, visitor)

"""Checking a partial experiment configuration: what a config template may hold.

A template holds some of an experiment's fields; the experiment gives the rest. So a template is
checked against the experiment schema with the requirements of every field-by-field merged object
lifted (no `entrypoint` or `searcher` needed, a searcher without `name`, a checkpoint storage with
only its GC policy), while everything else still holds: every key must be a known one, every value
given must have the right type and range. What a template merges in whole keeps its requirements:
a typed hyperparameter needs its bounds, a bind mount both its paths (template_merge.py says what
merges how). A searcher or checkpoint storage that names no member (no `name`, no `type`) merges
only its shared fields into an experiment's (as Determined's union merge does), so it may hold only
those. Rules that relate fields to each other (checks.py) wait for the merged config, which is
checked whole at creation as any config is.
"""

from __future__ import annotations

import copy
from typing import Any

from jsonschema import Draft7Validator

from services.master.domain.config.messages import describe
from services.master.domain.config.schema import EXPERIMENT_SCHEMA, Schema
from services.master.domain.config.template_merge import SEARCHER_SHARED_FIELDS, STORAGE_SHARED_FIELDS
from services.master.domain.config.validation import normalized, report

# Definitions a template gives whole (never merged field by field): they keep their requirements.
_WHOLE_DEFINITIONS = frozenset({"typed_hyperparameter"})
# The unions merged by member: the key naming the member, and the fields every member shares.
_UNIONS = {
    "searcher": ("name", SEARCHER_SHARED_FIELDS),
    "checkpoint_storage": ("type", STORAGE_SHARED_FIELDS),
}


def _lift_requirements(node: Any, *, whole: bool) -> Any:
    """A copy of the schema `node` without `required`, except inside what merges whole. Conditions
    (`if`) keep theirs: they select union branches by the keys an object has."""
    if isinstance(node, list):
        return [_lift_requirements(item, whole=whole) for item in node]
    if not isinstance(node, dict):
        return node
    lifted: dict[str, Any] = {}
    for key, value in node.items():
        if key == "required" and not whole:
            continue
        if key == "if":
            lifted[key] = copy.deepcopy(value)
        elif key == "items":  # list entries are merged whole
            lifted[key] = _lift_requirements(value, whole=True)
        elif key == "properties":
            lifted[key] = {name: _lift_requirements(sub, whole=whole) for name, sub in value.items()}
        elif key == "definitions":
            lifted[key] = {
                name: _lift_requirements(sub, whole=whole or name in _WHOLE_DEFINITIONS)
                for name, sub in value.items()
            }
        else:
            lifted[key] = _lift_requirements(value, whole=whole)
    return lifted


def _memberless_rule(definition: str, union: Schema, member_key: str, shared: frozenset[str]) -> Schema:
    """Without its member key, a union object may hold only the fields every member shares; a
    member's own field is refused as needing the key, any other as unknown."""
    gives = ", ".join(sorted(shared))
    needs_member = {
        "not": {},
        "x-messages": {"not": f"needs {definition}.{member_key} (without it a template gives only {gives})"},
    }
    known: dict[str, Any] = {}
    for part in union.get("allOf", []):
        for name, sub in part.get("then", {}).get("properties", {}).items():
            if name != member_key:
                known.setdefault(name, sub if name in shared else needs_member)
    return {
        "if": {"not": {"required": [member_key]}},
        "then": {"properties": known, "additionalProperties": False},
    }


def partial_schema(schema: Schema) -> Schema:
    lifted: Schema = _lift_requirements(schema, whole=False)
    for definition, (member_key, shared) in _UNIONS.items():
        union = lifted["definitions"][definition]
        union["allOf"] = [*union.get("allOf", []), _memberless_rule(definition, union, member_key, shared)]
    return lifted


PARTIAL_SCHEMA = partial_schema(EXPERIMENT_SCHEMA)
_VALIDATOR = Draft7Validator(PARTIAL_SCHEMA)


def validate_partial_config(raw: Any) -> list[str]:
    """The problems of `raw` as part of an experiment config, sorted by field path; empty if none."""
    if not isinstance(raw, dict):
        return ["config: must be a mapping"]
    config = normalized(raw)
    return report([found for error in _VALIDATOR.iter_errors(config) for found in describe(error)])

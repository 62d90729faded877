"""Reading an experiment configuration from its YAML text.

The loader differs from PyYAML's safe loader in three ways, each so that the result is plain JSON
data, as Determined's master sees it after its own YAML → JSON step:
- timestamps stay strings (a date in `data` must not become a datetime that JSON cannot carry);
- scalar mapping keys become strings (`1: x` → `"1"`, `true: x` → `"true"`);
- a key given twice in one mapping is an error instead of silently keeping the last value.
"""

from __future__ import annotations

from typing import Any

import yaml

from services.master.domain.config.errors import ConfigError


class _ConfigLoader(yaml.SafeLoader):
    pass


# Drop the timestamp resolver: a copy of the class table, so PyYAML's own SafeLoader is untouched.
_ConfigLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _key_text(key: Any) -> Any:
    if isinstance(key, bool):
        return "true" if key else "false"
    if key is None:
        return "null"
    if isinstance(key, (int, float)):
        return str(key)
    return key


def _construct_mapping(loader: _ConfigLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    mapping: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = _key_text(loader.construct_object(key_node, deep=True))
        if not isinstance(key, str):
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                "found a key that is not a scalar",
                key_node.start_mark,
            )
        if key in mapping:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found duplicate key '{key}'",
                key_node.start_mark,
            )
        mapping[key] = loader.construct_object(value_node, deep=True)
    return mapping


_ConfigLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _describe(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        reason = exc.problem or exc.context or "cannot be read"
        if exc.context and exc.problem:
            reason = f"{exc.problem} ({exc.context})"
        if mark is not None:
            return f"line {mark.line + 1}, column {mark.column + 1}: {reason}"
        return str(reason)
    return str(exc)


def parse_config_text(text: str) -> dict[str, Any]:
    """The configuration mapping written in `text`; ConfigError when it is not YAML or not a mapping."""
    try:
        document = yaml.load(text, Loader=_ConfigLoader)
    except yaml.YAMLError as exc:
        raise ConfigError([f"config: not valid YAML: {_describe(exc)}"]) from None
    if not isinstance(document, dict):
        raise ConfigError(["config: must be a mapping"])
    return document

"""Reading an experiment configuration from its YAML text.

The loader differs from PyYAML's safe loader in three ways, each so that the result is plain JSON
data, as Determined's master sees it after its own YAML → JSON step:
- timestamps stay strings (a date in `data` must not become a datetime that JSON cannot carry);
- scalar mapping keys become strings (`1: x` → `"1"`, `true: x` → `"true"`);
- a key given twice in one mapping is an error instead of silently keeping the last value.

It also bounds the document before anything is built from it (config/bounds.py): the text's size,
the nesting depth while composing (PyYAML's composer recurses, so it is stopped at the limit, far
from Python's), and the alias-expanded size and depth of the composed graph before construction.
"""

from __future__ import annotations

from typing import Any

import yaml

from services.master.domain.config.bounds import (
    MAX_CONFIG_DEPTH,
    check_node_graph,
    check_text_size,
    too_deep,
)
from services.master.domain.config.errors import ConfigError


class _ConfigLoader(yaml.SafeLoader):
    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        # The keys and indices leading to the node being composed, to name where it is too deep.
        self.compose_path: list[str | int] = []

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if parent is None:
            label: str | int | None = None
        elif isinstance(index, yaml.ScalarNode):
            label = index.value
        elif isinstance(index, int):
            label = index
        else:
            label = "?"  # a mapping key (PyYAML composes keys with index None)
        if label is not None:
            self.compose_path.append(label)
        try:
            if len(self.compose_path) > MAX_CONFIG_DEPTH:
                raise too_deep(self.compose_path, self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            if label is not None:
                self.compose_path.pop()


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
    check_text_size(text)
    try:
        # The reader refuses unprintable characters as soon as it is made.
        loader = _ConfigLoader(text)
    except yaml.YAMLError as exc:
        raise ConfigError([f"config: not valid YAML: {_describe(exc)}"]) from None
    try:
        root = loader.get_single_node()
        if root is None:
            document = None
        else:
            check_node_graph(root)
            document = loader.construct_document(root)
    except yaml.YAMLError as exc:
        raise ConfigError([f"config: not valid YAML: {_describe(exc)}"]) from None
    except ValueError as exc:
        # Python refuses to read an integer of more than 4,300 digits (int_max_str_digits).
        raise ConfigError([f"config: a value cannot be read: {exc}"]) from None
    finally:
        loader.dispose()
    if not isinstance(document, dict):
        raise ConfigError(["config: must be a mapping"])
    return document

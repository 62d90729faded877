"""Bounds on the size and shape of a configuration, checked before it is expanded or stored.

A config is user input that the master parses, expands, validates, stores twice (as written and
expanded) and sends back in every experiment read, so each of those steps must see a bounded
document. YAML aliases make a few hundred bytes of text stand for billions of nodes; deep nesting
makes every recursive step (PyYAML's composer, deepcopy, jsonschema, protobuf) reach Python's or
protobuf's recursion limit. Both are measured on the composed node graph, where an alias is one
shared node, so the check itself costs no more than the text.
"""

from __future__ import annotations

import math
from typing import Any

import yaml

from services.master.domain.config.errors import ConfigError
from services.master.domain.config.paths import format_path

# Determined's example configs are 1-5 KiB and the largest real ones (long `data` sections, big
# categorical lists) a few tens of KiB; 1 MiB leaves room for those and keeps every experiment read
# (which returns the config) small.
MAX_CONFIG_TEXT_CHARS = 1024 * 1024

# Determined configs nest about 6 levels (hyperparameter groups, `data`). The expanded config is
# returned as a google.protobuf.Struct, which takes two message levels per JSON level inside a reply
# that protobuf refuses past 100 levels: 32 stays well under that and far from Python's stack limit.
MAX_CONFIG_DEPTH = 32

# With aliases expanded, a config may not be larger than the largest one that could be written out:
# aliases save typing, not memory. Each node counts its scalar text plus NODE_OVERHEAD, about what
# it takes in the stored JSON (quotes, separators), so the measure follows the stored size.
MAX_CONFIG_EXPANDED_SIZE = MAX_CONFIG_TEXT_CHARS
NODE_OVERHEAD = 4


def _where(path: list[str | int], mark: yaml.Mark | None) -> str:
    place = format_path(path) or "config"
    if len(path) > 8:
        place = format_path(path[:8]) + ".…"
    if mark is not None:
        place += f" (line {mark.line + 1}, column {mark.column + 1})"
    return place


def check_text_size(text: str, field: str = "config") -> None:
    if len(text) > MAX_CONFIG_TEXT_CHARS:
        raise ConfigError([f"{field}: {len(text)} characters, over the limit of {MAX_CONFIG_TEXT_CHARS}"])


def too_deep(path: list[str | int], mark: yaml.Mark | None) -> ConfigError:
    return ConfigError([f"{_where(path, mark)}: nested deeper than {MAX_CONFIG_DEPTH} levels"])


def _children(node: yaml.Node) -> list[tuple[str | int, yaml.Node]]:
    if isinstance(node, yaml.SequenceNode):
        return list(enumerate(node.value))
    if isinstance(node, yaml.MappingNode):
        found: list[tuple[str | int, yaml.Node]] = []
        for key, value in node.value:
            label = key.value if isinstance(key, yaml.ScalarNode) else "?"
            found.append((label, key))
            found.append((label, value))
        return found
    return []


def check_node_graph(root: yaml.Node) -> None:
    """Refuse a composed document whose alias-expanded tree is too deep, too large or recursive.

    Each distinct node is measured once (its expanded size and height are remembered), so an alias
    bomb costs as much to measure as its text; the recursion is bounded by MAX_CONFIG_DEPTH.
    """
    measured: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded size, height)
    open_nodes: set[int] = set()

    def measure(node: yaml.Node, path: list[str | int]) -> tuple[int, int]:
        known = measured.get(id(node))
        if known is None:
            if id(node) in open_nodes:
                where = _where(path, node.start_mark)
                raise ConfigError([f"{where}: an alias refers to a node that contains it"])
            if len(path) > MAX_CONFIG_DEPTH:
                raise too_deep(path, node.start_mark)
            open_nodes.add(id(node))
            scalar = len(node.value) if isinstance(node, yaml.ScalarNode) else 0
            size, height = NODE_OVERHEAD + scalar, 0
            for label, child in _children(node):
                child_size, child_height = measure(child, [*path, label])
                size += child_size
                height = max(height, child_height + 1)
                if size > MAX_CONFIG_EXPANDED_SIZE:
                    raise ConfigError(
                        [
                            f"{_where(path, node.start_mark)}: with its aliases expanded the config is "
                            f"larger than {MAX_CONFIG_EXPANDED_SIZE} characters"
                        ]
                    )
            open_nodes.discard(id(node))
            known = measured[id(node)] = (size, height)
        if len(path) + known[1] > MAX_CONFIG_DEPTH:
            raise too_deep(path, node.start_mark)
        return known

    measure(root, [])


# Integers travel as JSON numbers and google.protobuf.Struct doubles and are stored in 64-bit
# columns; one beyond int64 cannot be stored or answered as given.
MAX_JSON_INT = 2**63 - 1


def _json_where(field: str, path: list[str | int]) -> str:
    shown = [field, *path[:8]] if field else path[:8]
    return (format_path(shown) or "config") + (".…" if len(path) > 8 else "")


def check_json_value(value: Any, field: str = "") -> None:
    """Refuse JSON-shaped data (parsed YAML, a protobuf Struct, a JSON body) that nests deeper than
    MAX_CONFIG_DEPTH, holds more than MAX_CONFIG_EXPANDED_SIZE nodes and text, or holds a number
    JSON cannot carry (an integer beyond int64, infinity, NaN). Each problem names where, under
    `field`. Iterative, so it never recurses, whatever it is given."""
    pending: list[tuple[Any, list[str | int]]] = [(value, [])]
    size = 0
    while pending:
        item, path = pending.pop()
        if len(path) > MAX_CONFIG_DEPTH:
            raise ConfigError([f"{_json_where(field, path)}: nested deeper than {MAX_CONFIG_DEPTH} levels"])
        size += NODE_OVERHEAD
        if isinstance(item, dict):
            size += sum(len(str(k)) + NODE_OVERHEAD for k in item)
            pending.extend((v, [*path, str(k)]) for k, v in item.items())
        elif isinstance(item, list):
            pending.extend((v, [*path, i]) for i, v in enumerate(item))
        elif isinstance(item, str):
            size += len(item)
        elif isinstance(item, int) and not isinstance(item, bool) and abs(item) > MAX_JSON_INT:
            bits = item.bit_length()
            raise ConfigError(
                [f"{_json_where(field, path)}: an integer of {bits} bits is beyond the 64-bit range"]
            )
        elif isinstance(item, float) and not math.isfinite(item):
            raise ConfigError([f"{_json_where(field, path)}: {item} is not a finite number"])
        if size > MAX_CONFIG_EXPANDED_SIZE:
            raise ConfigError([f"{field or 'config'}: larger than {MAX_CONFIG_EXPANDED_SIZE} characters"])

"""Hyperparameter values come back from the searcher as protobuf Struct values, where every number is
a float. Trial code must see them typed as the configuration declares: ints as ints, consts and
categorical choices exactly as written."""

from __future__ import annotations

from typing import Any

_MISSING = object()


def _choice_key(x: Any) -> tuple[bool, Any]:
    # True == 1 in Python (and hashes alike); a bool choice only matches a bool value.
    return (isinstance(x, bool), x)


class HparamTyper:
    """Types the searcher's values for the trials of one experiment (`definitions`: its config's
    hyperparameters). A categorical's choices are indexed once, so a value is found in one lookup
    however many choices there are: scanning them for each trial made a grid over a long
    categorical quadratic (3,000 choices: 90 µs a trial)."""

    def __init__(self, definitions: dict[str, Any]) -> None:
        self._definitions = definitions
        # id(spec) -> (spec, its hashable choices by key, the first of equal ones kept): kept with
        # the spec, so the id stays that spec's.
        self._indexes: dict[int, tuple[Any, dict[tuple[bool, Any], Any]]] = {}

    def typed(self, values: dict[str, Any]) -> dict[str, Any]:
        definitions = self._definitions
        return {
            name: self._typed(value, definitions[name]) if name in definitions else value
            for name, value in values.items()
        }

    def _typed(self, value: Any, spec: Any) -> Any:
        if not isinstance(spec, dict):
            return spec  # a bare value is an implicit const: take it as written
        kind = spec.get("type")
        if kind is None:  # a nested group
            if not isinstance(value, dict):
                return value
            return {key: self._typed(value.get(key), sub) for key, sub in spec.items() if key in value}
        if kind == "const":
            return spec.get("val")
        if kind == "int":
            return round(value) if isinstance(value, (int, float)) else value
        if kind in ("double", "log"):
            return float(value) if isinstance(value, (int, float)) else value
        if kind == "categorical":
            return self._choice(value, spec)
        return value

    def _choice(self, value: Any, spec: dict[str, Any]) -> Any:
        """The choice written in the config that `value` equals (the first, in order), else `value`."""
        try:
            key = _choice_key(value)
            hash(key)
        except TypeError:
            # A list or a mapping: only an unhashable choice can equal it, found by a scan.
            for choice in spec.get("vals", []):
                if choice == value:
                    return choice
            return value
        kept = self._indexes.get(id(spec))
        if kept is None:
            index: dict[tuple[bool, Any], Any] = {}
            for choice in spec.get("vals", []):
                try:
                    index.setdefault(_choice_key(choice), choice)
                except TypeError:
                    pass  # unhashable: no scalar value equals it
            kept = self._indexes[id(spec)] = (spec, index)
        found = kept[1].get(key, _MISSING)
        return value if found is _MISSING else found


def typed_hparams(values: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    """One trial's values typed as `definitions` declare (HparamTyper, for many trials at once)."""
    return HparamTyper(definitions).typed(values)

"""Search methods by name. The session layer builds methods only through a registry, so a new method
(an in-process plug-in) is one `register` call away."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from cairn.searcher_plugin.errors import InvalidSpec
from services.searcher.domain.hyperparameters import HyperparameterSpace
from services.searcher.domain.method import SearchMethod
from services.searcher.domain.methods.grid_search import build_grid
from services.searcher.domain.methods.halving import build_adaptive_asha, build_async_halving
from services.searcher.domain.methods.random_search import build_random, build_single

# Builds a method from the `searcher` section and the parsed hyperparameters, raising InvalidSpec
# (with the field's path) for a configuration it cannot run.
MethodFactory = Callable[[Mapping[str, Any], HyperparameterSpace], SearchMethod]


class MethodRegistry:
    def __init__(self) -> None:
        self._factories: dict[str, MethodFactory] = {}

    def register(self, name: str, factory: MethodFactory) -> None:
        if name in self._factories:
            raise ValueError(f"search method {name!r} is already registered")
        self._factories[name] = factory

    def names(self) -> list[str]:
        return sorted(self._factories)

    def factory(self, name: Any, path: str = "searcher.name") -> MethodFactory:
        runs = f"this searcher runs: {', '.join(self.names())}"
        if name is None:
            raise InvalidSpec(f"{path}: required ({runs})")
        if not isinstance(name, str):
            raise InvalidSpec(f"{path}: must be a string ({runs})")
        factory = self._factories.get(name)
        if factory is None:
            raise InvalidSpec(f"{path}: unknown searcher '{name}' ({runs})")
        return factory


def builtin_registry() -> MethodRegistry:
    registry = MethodRegistry()
    registry.register("single", build_single)
    registry.register("random", build_random)
    registry.register("grid", build_grid)
    registry.register("async_halving", build_async_halving)
    registry.register("adaptive_asha", build_adaptive_asha)
    return registry

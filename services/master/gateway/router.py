"""Finds the binding for an HTTP method and path: the most specific template wins.

Routes are sorted once, at startup, by the specificity of their segments (literals before
variables before `**`), so the first template that matches is the most specific one:
`/api/v1/trials/metrics/trial_metrics` is never taken for `/api/v1/trials/{trial_id}/...`.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.master.gateway.http_rules import HttpBinding
from services.master.gateway.path_template import PathTemplate, parse_template


@dataclass(frozen=True)
class Route:
    template: PathTemplate
    binding: HttpBinding


@dataclass(frozen=True)
class Match:
    binding: HttpBinding
    path_params: dict[str, str]  # field path → decoded text


class NoRoute(Exception):
    """No template matches the path."""


class MethodNotAllowed(Exception):
    """Some template matches the path, but not for this HTTP method."""

    def __init__(self, allowed: list[str]) -> None:
        super().__init__(f"allowed: {', '.join(allowed)}")
        self.allowed = allowed


class Router:
    def __init__(self, bindings: list[HttpBinding]) -> None:
        routes = [Route(parse_template(b.template), b) for b in bindings]
        seen: dict[tuple[str, tuple[int, ...], str], str] = {}
        for route in routes:
            # Two templates of the same shape and method would make the winner arbitrary.
            shape = (route.binding.http_method, route.template.specificity, _shape(route.template.text))
            if shape in seen:
                raise ValueError(
                    f"{route.binding.rpc.name} and {seen[shape]} both bind "
                    f"{route.binding.http_method} {route.template.text}"
                )
            seen[shape] = route.binding.rpc.name
        # Stable sort: among equally specific templates, declaration order decides.
        self.routes = sorted(routes, key=lambda r: r.template.specificity)

    def match(self, http_method: str, path: str) -> Match:
        allowed: list[str] = []
        for route in self.routes:
            params = route.template.match(path)
            if params is None:
                continue
            if route.binding.http_method == http_method:
                return Match(route.binding, params)
            if route.binding.http_method not in allowed:
                allowed.append(route.binding.http_method)
        if allowed:
            raise MethodNotAllowed(allowed)
        raise NoRoute(path)


def _shape(template: str) -> str:
    """The template with variable names erased: `/a/{x}` and `/a/{y}` have the same shape."""
    out: list[str] = []
    depth = 0
    for char in template:
        if char == "{":
            depth += 1
            out.append("{")
        elif char == "}":
            depth -= 1
            out.append("}")
        elif depth == 0:
            out.append(char)
    return "".join(out)

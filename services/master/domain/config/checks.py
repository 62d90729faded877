"""Rules that relate two fields to each other, which JSON Schema (draft 7) cannot express.

Each rule looks only at values of the right type: a value of the wrong type already has its own
problem from the schema, and one message per problem is enough.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from services.master.domain.config.log_policies import log_policy_problems
from services.master.domain.config.messages import Problem
from services.master.domain.config.paths import child_path


def _bound(value: Any, kind: str) -> float | None:
    """The value of a minval/maxval that has the right type for its hyperparameter, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if kind == "int" and not float(value).is_integer():
        return None
    return float(value)


def _hparam_ranges(hparams: Any, path: str) -> Iterator[Problem]:
    if not isinstance(hparams, dict):
        return
    for name, spec in hparams.items():
        spec_path = child_path(path, str(name))
        if not isinstance(spec, dict):
            continue  # an implicit const
        if "type" not in spec:
            yield from _hparam_ranges(spec, spec_path)
            continue
        kind = spec["type"]
        if kind not in ("int", "double", "log"):
            continue
        low, high = _bound(spec.get("minval"), kind), _bound(spec.get("maxval"), kind)
        if low is not None and high is not None and not low < high:
            yield Problem(child_path(spec_path, "maxval"), "must be greater than minval")


def _searcher_rules(searcher: Any) -> Iterator[Problem]:
    if not isinstance(searcher, dict):
        return
    if searcher.get("source_trial_id") is not None and searcher.get("source_checkpoint_uuid") is not None:
        yield Problem(
            "searcher.source_checkpoint_uuid", "cannot be given together with searcher.source_trial_id"
        )
    if searcher.get("name") == "custom":
        has_address = searcher.get("address") is not None
        has_plugin = searcher.get("plugin") is not None
        if not has_address and not has_plugin:
            yield Problem("searcher.address", "required for a custom searcher (or searcher.plugin)")
        elif has_address and has_plugin:
            yield Problem("searcher.plugin", "cannot be given together with searcher.address")


def _proxy_port_duplicates(environment: Any) -> Iterator[Problem]:
    """A port listed twice: its service id (`<task id>:<port>`) would name two services."""
    if not isinstance(environment, dict) or not isinstance(environment.get("proxy_ports"), list):
        return
    first_at: dict[int, int] = {}
    for index, entry in enumerate(environment["proxy_ports"]):
        port = entry.get("proxy_port") if isinstance(entry, dict) else None
        if isinstance(port, bool) or not isinstance(port, int):
            continue
        if port in first_at:
            yield Problem(
                f"environment.proxy_ports[{index}].proxy_port",
                f"port {port} is already listed at environment.proxy_ports[{first_at[port]}]",
            )
        else:
            first_at[port] = index


def cross_field_problems(config: dict[str, Any]) -> list[Problem]:
    return [
        *_hparam_ranges(config.get("hyperparameters"), "hyperparameters"),
        *_searcher_rules(config.get("searcher")),
        *_proxy_port_duplicates(config.get("environment")),
        *log_policy_problems(config.get("log_policies")),
    ]

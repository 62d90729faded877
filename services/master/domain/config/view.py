"""A typed, read-only view of an expanded configuration: how master code reads a config's fields.

Stored configs are expanded (every default written in), so the view reads what is there; a field a
config lacks (one stored before the field existed) falls back to the schema's own default
(schema_default), never to a number written here again. The view holds the config's own nested
values, not copies: it is for reading.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from services.master.domain.config.schema import DEVICE_FLAVOURS, schema_default

# Searchers whose trial count is fixed by the config's max_trials (grid's comes from its grid).
_MAX_TRIALS_SEARCHERS = ("random", "adaptive_asha", "async_halving", "custom")


def _entrypoint(value: Any) -> tuple[list[str], bool]:
    # A string runs through `sh -c`, a list is executed as given (as Determined's launcher does).
    if isinstance(value, str):
        return [value], True
    if isinstance(value, list):
        return [str(part) for part in value], False
    return [], False


def _environment_variables(value: Any) -> dict[str, str]:
    if isinstance(value, dict):
        value = value.get("cpu") or []  # per-flavour lists: Cairn's runtimes run the cpu flavour
    variables: dict[str, str] = {}
    for item in value or []:
        key, _, text = str(item).partition("=")
        variables[key] = text
    return variables


def _image(value: Any) -> str | None:
    if isinstance(value, dict):
        for flavour in DEVICE_FLAVOURS:
            if value.get(flavour):
                return str(value[flavour])
        return None
    return str(value) if value else None


def environment_of(environment: Mapping[str, Any]) -> tuple[dict[str, str], str | None]:
    """(environment_variables, image) of an `environment` section, as a trial's are read; for the
    configs of tasks that are not experiments (commands, generic tasks)."""
    return _environment_variables(environment.get("environment_variables")), _image(environment.get("image"))


@dataclass(frozen=True)
class ProxyPort:
    """One entry of environment.proxy_ports: a port the trial's chief serves through the master's
    proxy at `/proxy/{task id}:{port}/`."""

    port: int
    tcp: bool  # a byte stream tunnelled over a websocket, not HTTP
    unauthenticated: bool  # reachable without a session


def proxy_ports_of(environment: Mapping[str, Any]) -> tuple[ProxyPort, ...]:
    """The proxy ports of an `environment` section (validated: each an object with its port)."""
    return tuple(
        ProxyPort(
            port=int(entry["proxy_port"]),
            tcp=bool(entry.get("proxy_tcp", False)),
            unauthenticated=bool(entry.get("unauthenticated", False)),
        )
        for entry in environment.get("proxy_ports") or []
        if isinstance(entry, dict) and "proxy_port" in entry
    )


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


@dataclass(frozen=True)
class ExperimentConfigView:
    name: str
    description: str
    labels: list[str]
    entrypoint: list[str]
    entrypoint_is_shell: bool
    searcher: dict[str, Any]
    searcher_name: str
    searcher_metric: str
    smaller_is_better: bool
    max_trials: int | None
    hyperparameters: dict[str, Any]
    slots_per_trial: int
    resource_pool: str
    priority: int | None
    weight: float
    max_slots: int | None
    max_restarts: int
    checkpoint_storage: dict[str, Any]
    environment_variables: dict[str, str]
    image: str | None
    experiment_seed: int
    preemption_timeout: int | None
    data: dict[str, Any]
    proxy_ports: tuple[ProxyPort, ...] = ()

    @property
    def time_unit(self) -> str:
        """What the searcher counts training in: `time_metric`, else the legacy max_length's unit
        (`batches` for a bare number)."""
        if self.searcher.get("time_metric"):
            return str(self.searcher["time_metric"])
        max_length = self.searcher.get("max_length")
        if isinstance(max_length, dict) and max_length:
            return str(next(iter(max_length)))
        return "batches"

    @property
    def training_length(self) -> int:
        """The length the searcher section names (max_time, else max_length); 0 when none."""
        if self.searcher.get("max_time"):
            return int(self.searcher["max_time"])
        max_length = self.searcher.get("max_length")
        if isinstance(max_length, dict):
            values = [v for v in max_length.values() if isinstance(v, (int, float))]
            return int(values[0]) if values else 0
        if isinstance(max_length, (int, float)):
            return int(max_length)
        return 0

    @classmethod
    def from_expanded(cls, cfg: Mapping[str, Any]) -> ExperimentConfigView:
        """The view of a config returned by expand_config (and stored with the experiment)."""
        searcher = cfg.get("searcher") or {}
        resources = cfg.get("resources") or {}
        environment = cfg.get("environment") or {}

        def field(section: Mapping[str, Any], *path: str) -> Any:
            return section[path[-1]] if path[-1] in section else schema_default(*path)

        entrypoint, shell = _entrypoint(cfg.get("entrypoint"))
        name = str(searcher.get("name", ""))
        max_trials = searcher.get("max_trials") if name in _MAX_TRIALS_SEARCHERS else None
        if isinstance(max_trials, bool) or not isinstance(max_trials, int):
            max_trials = None  # a custom searcher's fields are free-form
        return cls(
            name=str(cfg.get("name") or ""),
            description=str(cfg.get("description") or ""),
            labels=[str(label) for label in cfg.get("labels") or []],
            entrypoint=entrypoint,
            entrypoint_is_shell=shell,
            searcher=dict(searcher),
            searcher_name=name,
            searcher_metric=str(searcher.get("metric", "")),
            smaller_is_better=bool(field(searcher, "searcher", "smaller_is_better")),
            max_trials=_optional_int(max_trials),
            hyperparameters=dict(cfg.get("hyperparameters") or {}),
            slots_per_trial=int(field(resources, "resources", "slots_per_trial")),
            resource_pool=str(resources.get("resource_pool") or ""),
            priority=_optional_int(field(resources, "resources", "priority")),
            weight=float(field(resources, "resources", "weight")),
            max_slots=_optional_int(field(resources, "resources", "max_slots")),
            max_restarts=int(field(cfg, "max_restarts")),
            checkpoint_storage=dict(cfg.get("checkpoint_storage") or {}),
            environment_variables=_environment_variables(environment.get("environment_variables")),
            image=_image(environment.get("image")),
            experiment_seed=int((cfg.get("reproducibility") or {}).get("experiment_seed", 0)),
            preemption_timeout=_optional_int(field(cfg, "preemption_timeout")),
            data=dict(cfg.get("data") or {}),
            proxy_ports=proxy_ports_of(environment),
        )


def config_view(config: Mapping[str, Any]) -> ExperimentConfigView:
    """The typed view of a stored (expanded) experiment config."""
    return ExperimentConfigView.from_expanded(config)

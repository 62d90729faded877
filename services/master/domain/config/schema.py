"""The JSON Schema (draft 7) of the experiment configuration Cairn accepts.

It covers the subset of Determined's experiment config (schemas/expconf/v0) that Cairn runs, plus the
keys Cairn ignores but accepts so that Determined configs load unchanged. Written as Python so that
the repeated parts (searcher commons, lengths, GC fields) are built once.

Conventions the rest of the package relies on:
- unions are dispatched with `if`/`then` on their key (`searcher.name`, `checkpoint_storage.type`,
  a hyperparameter's `type`), never with `oneOf`/`anyOf`, so that jsonschema reports the errors of
  the matching branch only;
- `default` is the value expansion fills in for an absent field (see defaults.py);
- a field whose `type` does not admit null treats an explicit null as absent, as Determined does;
- `x-messages` ({keyword: text}) replaces the generic message for that keyword, and
  `x-value-messages` ({value: text}) explains why a specific value is refused by an `enum`.
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]

SUPPORTED_SEARCHERS = ("single", "random", "grid", "adaptive_asha", "async_halving", "custom")
REMOVED_SEARCHERS = ("adaptive", "adaptive_simple", "sync_halving")
SUPPORTED_STORAGE = ("shared_fs", "directory", "s3")
UNSUPPORTED_STORAGE = ("gcs", "azure")
HPARAM_TYPES = ("const", "int", "double", "log", "categorical")
GRID_COUNTED_TYPES = ("int", "double", "log")
DEVICE_FLAVOURS = ("cpu", "cuda", "rocm", "gpu")
LENGTH_UNITS = ("batches", "records", "epochs")

DEFAULT_MAX_CONCURRENT_TRIALS = 16
# The searcher's seed is a uint32 on the wire (cairn.searcher.v1.SearchSpec.seed).
MAX_EXPERIMENT_SEED = 2**32 - 1

REMOVED_SEARCHER_MESSAGE = "was removed from Determined and is not supported"
GRID_COUNT_MESSAGE = "grid search needs a count for int, double and log hyperparameters"


# Config integers are counts (slots, restarts, trials, rungs, batches between checks) that Cairn
# keeps in 32-bit database columns and protobuf int32 fields and that no real config comes near;
# without a bound, 2^63 or 1e308 (an "integer" to JSON Schema) would pass and fail later.
MAX_CONFIG_COUNT = 2**31 - 1
# Lengths (records, batches, epochs) and integer hyperparameters may be larger, up to the integers
# that a JSON number and a google.protobuf.Struct double carry exactly.
MAX_JSON_SAFE_INT = 2**53

# environment.preload_modules: dotted Python module names, a bounded list.
MAX_PRELOAD_MODULES = 64
MODULE_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z"

# environment.proxy_ports: the ports a trial's chief serves through the master's proxy
# (domain/allocations/experiment_proxy.py). A TCP port number each; Determined sets no count, the
# bound keeps a config from asking the proxy to know thousands of services per trial.
MAX_PROXY_PORTS = 64
PROXY_PORT_ENTRY: Schema = {
    "type": "object",
    "properties": {
        "proxy_port": {"type": "integer", "minimum": 1, "maximum": 65535},
        "proxy_tcp": {"type": "boolean", "default": False},
        "unauthenticated": {"type": "boolean", "default": False},
    },
    "required": ["proxy_port"],
    "additionalProperties": False,
}


def _integer(minimum: int | None = None, maximum: int = MAX_CONFIG_COUNT) -> Schema:
    schema: Schema = {"type": "integer", "maximum": maximum}
    if minimum is not None:
        schema["minimum"] = minimum
    return schema


# Docker's AuthConfig fields (Determined's environment.registry_auth).
REGISTRY_AUTH_FIELDS = (
    "username",
    "password",
    "auth",
    "email",
    "serveraddress",
    "identitytoken",
    "registrytoken",
)


def _string(non_empty: bool = False) -> Schema:
    return {"type": "string", "minLength": 1} if non_empty else {"type": "string"}


def _boolean() -> Schema:
    return {"type": "boolean"}


def _ref(name: str) -> Schema:
    return {"$ref": f"#/definitions/{name}"}


def _defaulted(schema: Schema, value: Any) -> Schema:
    return {**schema, "default": value}


def _strings() -> Schema:
    return {"type": "array", "items": {"type": "string"}}


def _closed(
    properties: dict[str, Schema], required: tuple[str, ...] = (), extra: Schema | None = None
) -> Schema:
    """An object that admits only the listed properties."""
    schema: Schema = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = list(required)
    schema.update(extra or {})
    return schema


def _when(condition: Schema, then: Schema) -> Schema:
    return {"if": condition, "then": then}


def _key_is(key: str, value: str) -> Schema:
    """The condition selecting a union branch: an object whose `key` is `value`."""
    return {"type": "object", "properties": {key: {"const": value}}, "required": [key]}


def _length_keywords(minimum: int) -> Schema:
    """The object keywords of Determined's Length: exactly one of {batches|records|epochs: int}."""
    exactly_one = f"must have exactly one of {', '.join(LENGTH_UNITS)}"
    return {
        "properties": {unit: _integer(minimum, MAX_JSON_SAFE_INT) for unit in LENGTH_UNITS},
        "additionalProperties": False,
        "minProperties": 1,
        "maxProperties": 1,
        "x-messages": {"minProperties": exactly_one, "maxProperties": exactly_one},
    }


def _length(minimum: int) -> Schema:
    return {"type": "object", **_length_keywords(minimum)}


# --- hyperparameters ---------------------------------------------------------------------------------


def _hparam_branch(properties: dict[str, Schema], required: tuple[str, ...]) -> Schema:
    return _closed({"type": {}, **properties}, required=("type", *required))


_HPARAM_BRANCHES: dict[str, Schema] = {
    "const": _hparam_branch({"val": {}}, ("val",)),
    "int": _hparam_branch(
        {
            "minval": _integer(-MAX_JSON_SAFE_INT, MAX_JSON_SAFE_INT),
            "maxval": _integer(-MAX_JSON_SAFE_INT, MAX_JSON_SAFE_INT),
            "count": _integer(1),
        },
        ("minval", "maxval"),
    ),
    "double": _hparam_branch(
        {"minval": {"type": "number"}, "maxval": {"type": "number"}, "count": _integer(1)},
        ("minval", "maxval"),
    ),
    "log": _hparam_branch(
        {
            "minval": {"type": "number"},
            "maxval": {"type": "number"},
            "base": {"type": "number", "exclusiveMinimum": 0},
            "count": _integer(1),
        },
        ("minval", "maxval", "base"),
    ),
    "categorical": _hparam_branch({"vals": {"type": "array", "minItems": 1}}, ("vals",)),
}

_TYPED_HPARAM: Schema = {
    "properties": {"type": {"enum": list(HPARAM_TYPES)}},
    "allOf": [_when(_key_is("type", kind), branch) for kind, branch in _HPARAM_BRANCHES.items()],
}

# A mapping with `type` is one hyperparameter; a mapping without it is a nested group; anything else
# (a scalar or a list) is an implicit const.
_HPARAM: Schema = {
    "if": {"type": "object", "required": ["type"]},
    "then": _ref("typed_hyperparameter"),
    "else": _when({"type": "object"}, _ref("hyperparameters")),
}

_HPARAMS: Schema = {"type": "object", "additionalProperties": _ref("hyperparameter")}

# Under grid search every int/double/log hyperparameter, however deeply nested, needs a count.
_GRID_HPARAM: Schema = {
    "if": {
        "type": "object",
        "required": ["type"],
        "properties": {"type": {"enum": list(GRID_COUNTED_TYPES)}},
    },
    "then": {"required": ["count"], "x-messages": {"required": GRID_COUNT_MESSAGE}},
    "else": _when({"type": "object", "not": {"required": ["type"]}}, _ref("grid_hyperparameters")),
}

_GRID_HPARAMS: Schema = {"type": "object", "additionalProperties": _ref("grid_hyperparameter")}


# --- searcher ----------------------------------------------------------------------------------------


def _searcher_common() -> dict[str, Schema]:
    return {
        "name": {},
        "metric": _string(non_empty=True),
        "smaller_is_better": _defaulted(_boolean(), True),
        "source_trial_id": _defaulted(_integer(1), None),
        "source_checkpoint_uuid": _defaulted(_string(non_empty=True), None),
    }


def _searcher_branch(properties: dict[str, Schema], *rules: Schema, required: tuple[str, ...] = ()) -> Schema:
    # max_length is deprecated in Determined 0.38 but still read: a bare count or a Length.
    max_length: Schema = {
        "type": ["integer", "object"],
        "minimum": 1,
        "maximum": MAX_JSON_SAFE_INT,
        **_length_keywords(1),
    }
    branch = _closed({**_searcher_common(), "max_length": max_length, **properties}, required=required)
    if rules:
        branch["allOf"] = list(rules)
    return branch


def _max_trials() -> Schema:
    return _integer(1)


def _max_concurrent_trials() -> Schema:
    return _defaulted(_integer(0), DEFAULT_MAX_CONCURRENT_TRIALS)


# Cairn's halving searchers: Determined 0.38 only stops trials (it has no promotions), so stop_once
# defaults to true to keep Determined configs behaving the same; stop_once: false selects Cairn's
# promotion mode.
def _halving_fields() -> dict[str, Schema]:
    return {
        "max_trials": _max_trials(),
        "time_metric": _string(non_empty=True),
        "max_time": _integer(1, MAX_JSON_SAFE_INT),
        "divisor": _defaulted({"type": "number", "exclusiveMinimum": 1}, 4),
        "max_concurrent_trials": _max_concurrent_trials(),
        "stop_once": _defaulted(_boolean(), True),
    }


# time_metric and max_time go together, and are required unless the legacy max_length is given.
_HALVING_RULES: tuple[Schema, ...] = (
    {"if": {"not": {"required": ["max_length"]}}, "then": {"required": ["time_metric", "max_time"]}},
    _when({"required": ["time_metric"]}, {"required": ["max_time"]}),
    _when({"required": ["max_time"]}, {"required": ["time_metric"]}),
)

_SEARCHER_BRANCHES: dict[str, Schema] = {
    "single": _searcher_branch({}),
    "random": _searcher_branch(
        {"max_trials": _max_trials(), "max_concurrent_trials": _max_concurrent_trials()},
        required=("max_trials",),
    ),
    "grid": _searcher_branch({"max_concurrent_trials": _max_concurrent_trials()}),
    "adaptive_asha": _searcher_branch(
        {
            **_halving_fields(),
            "mode": _defaulted({"enum": ["aggressive", "standard", "conservative"]}, "standard"),
            "max_rungs": _defaulted(_integer(1), 5),
            "bracket_rungs": _defaulted({"type": "array", "items": _integer(1)}, []),
        },
        *_HALVING_RULES,
        required=("max_trials",),
    ),
    "async_halving": _searcher_branch(
        {**_halving_fields(), "num_rungs": _integer(1)},
        *_HALVING_RULES,
        required=("num_rungs", "max_trials"),
    ),
}

# A custom searcher is a process serving Cairn's SearcherService (`address`) or a registered plug-in
# (`plugin`); whatever else it is given is its own business.
_CUSTOM_SEARCHER: Schema = {
    "type": "object",
    "properties": {
        **_searcher_common(),
        "address": {
            "type": "string",
            "pattern": r"^\S+:[0-9]{1,5}$",
            "x-messages": {"pattern": "must be host:port"},
        },
        "plugin": _string(non_empty=True),
    },
}

_SEARCHER: Schema = {
    "type": "object",
    "required": ["name", "metric"],
    "properties": {
        "name": {
            "type": "string",
            "enum": list(SUPPORTED_SEARCHERS),
            "x-value-messages": dict.fromkeys(REMOVED_SEARCHERS, REMOVED_SEARCHER_MESSAGE),
        }
    },
    "allOf": [
        *(_when(_key_is("name", name), branch) for name, branch in _SEARCHER_BRANCHES.items()),
        _when(_key_is("name", "custom"), _CUSTOM_SEARCHER),
    ],
}


# --- resources, storage, environment -------------------------------------------------------------------

_RESOURCES: Schema = _closed(
    {
        "slots_per_trial": _defaulted(_integer(0), 1),
        # "" is the master's default pool; expansion names it.
        "resource_pool": _defaulted(_string(), ""),
        "priority": _defaulted(_integer(1, 99), None),
        "weight": _defaulted({"type": "number", "exclusiveMinimum": 0}, 1),
        "max_slots": _defaulted(_integer(1), None),
        "shm_size": {
            "type": ["integer", "string"],
            "minimum": 0,
            "maximum": MAX_JSON_SAFE_INT,
            "pattern": r"^([0-9]*[.])?[0-9]+ ?(([kmgtpKMGTP]([iI]?[bB])?)|[bB])?$",
            "x-messages": {"pattern": "must be a memory size such as 4G or 512Mi"},
        },
        "devices": {"type": "array", "items": {"type": ["string", "object"]}},
        # Determined legacy keys, accepted and ignored.
        "agent_label": {"type": "string"},
        "is_single_node": _boolean(),
        "native_parallel": _boolean(),
        "slots": _integer(),
    }
)

_GC_FIELDS: dict[str, Schema] = {
    "save_experiment_best": _defaulted(_integer(0), 0),
    "save_trial_best": _defaulted(_integer(0), 1),
    "save_trial_latest": _defaulted(_integer(0), 1),
}


def _storage_branch(properties: dict[str, Schema], required: tuple[str, ...]) -> Schema:
    return _closed({"type": {}, **properties, **_GC_FIELDS}, required=("type", *required))


_STORAGE_BRANCHES: dict[str, Schema] = {
    "shared_fs": _storage_branch(
        {
            "host_path": _string(non_empty=True),
            "storage_path": _string(),
            "container_path": _string(),
            "propagation": _string(),
            "checkpoint_path": _string(),
            "tensorboard_path": _string(),
        },
        ("host_path",),
    ),
    "directory": _storage_branch({"container_path": _string(non_empty=True)}, ("container_path",)),
    "s3": _storage_branch(
        {
            "bucket": _string(non_empty=True),
            "prefix": _string(),
            "endpoint_url": _string(),
            "access_key": _string(),
            "secret_key": _string(),
        },
        ("bucket",),
    ),
}

_CHECKPOINT_STORAGE: Schema = {
    "type": "object",
    "required": ["type"],
    "properties": {
        "type": {
            "type": "string",
            "enum": list(SUPPORTED_STORAGE),
            "x-value-messages": dict.fromkeys(UNSUPPORTED_STORAGE, "is not supported by Cairn yet"),
        }
    },
    "allOf": [_when(_key_is("type", kind), branch) for kind, branch in _STORAGE_BRANCHES.items()],
}

# KEY is a portable environment variable name (POSIX: letters, digits and _, not starting with a
# digit); the value may hold anything but NUL, which no process environment can carry.
ENV_RULES = " (KEY: letters, digits and _, not starting with a digit; VALUE: no NUL characters)"
_ENV_ASSIGNMENT: Schema = {
    "type": "string",
    "pattern": r"^[A-Za-z_][A-Za-z0-9_]*=[^\x00]*\Z",
    "x-messages": {"pattern": f"must have the form KEY=VALUE{ENV_RULES}"},
}
_ENV_LIST: Schema = {"type": "array", "items": _ENV_ASSIGNMENT}

_ENVIRONMENT: Schema = _closed(
    {
        # A string, or one image per device flavour.
        "image": {
            "type": ["string", "object"],
            "properties": {flavour: _string(non_empty=True) for flavour in DEVICE_FLAVOURS},
            "additionalProperties": False,
            "default": None,
        },
        # A list of KEY=VALUE, or one such list per device flavour.
        "environment_variables": {
            "type": ["array", "object"],
            "items": _ENV_ASSIGNMENT,
            "properties": dict.fromkeys(DEVICE_FLAVOURS, _ENV_LIST),
            "additionalProperties": False,
            "default": [],
        },
        "force_pull_image": _defaulted(_boolean(), False),
        # The docker runtime reads registry_auth and add/drop_capabilities (checked there again,
        # naming the field: services/agent/runtime/docker_spec.py); the process runtime runs no
        # image and says so in the task's log. registry_auth is Docker's AuthConfig, as Determined
        # takes it: refused here, before anything is stored, when it is not.
        "registry_auth": _closed({key: _string() for key in REGISTRY_AUTH_FIELDS}),
        "pod_spec": {"type": "object"},
        # Each port once (checks.py): `/proxy/{task id}:{port}/` names one service.
        "proxy_ports": {
            "type": "array",
            "maxItems": MAX_PROXY_PORTS,
            "items": PROXY_PORT_ENTRY,
        },
        "ports": {"type": "object", "additionalProperties": _integer(0, 65535)},
        "add_capabilities": _strings(),
        "drop_capabilities": _strings(),
        # Cairn's extension (Determined has no such key): the heavy modules (torch, ...) a trial
        # imports. The process runtime keeps an interpreter per slot with them already imported and
        # starts the next trial's `python3 ...` entrypoint in it (warm starts; see the agent's README).
        "preload_modules": {
            "type": "array",
            "maxItems": MAX_PRELOAD_MODULES,
            "items": {
                "type": "string",
                "pattern": MODULE_NAME_PATTERN,
                "x-messages": {"pattern": "must be a module name such as torch or numpy.linalg"},
            },
        },
    }
)

_BIND_MOUNT: Schema = _closed(
    {
        "host_path": _string(non_empty=True),
        "container_path": _string(non_empty=True),
        "read_only": _defaulted(_boolean(), False),
        "propagation": _defaulted(_string(), "rprivate"),
    },
    required=("host_path", "container_path"),
)


# --- the experiment --------------------------------------------------------------------------------------

_FREE_OBJECT: Schema = {"type": "object"}
# The webhooks an experiment names (Determined's WebhooksConfigV0): ids and names, bounded lists.
MAX_NAMED_WEBHOOKS = 100
_INTEGRATIONS: Schema = {
    "type": "object",
    "properties": {
        "webhooks": _closed(
            {
                "webhook_id": {"type": "array", "items": _integer(1), "maxItems": MAX_NAMED_WEBHOOKS},
                "webhook_name": {
                    "type": "array",
                    "items": {"type": "string", "maxLength": 255},
                    "maxItems": MAX_NAMED_WEBHOOKS,
                },
                "exclude": _boolean(),
            }
        )
    },
}

_EXPERIMENT_PROPERTIES: dict[str, Schema] = {
    # name has no schema default: expansion generates one (see defaults.py).
    "name": _string(non_empty=True),
    "description": _defaulted(_string(), None),
    "labels": _defaulted(_strings(), []),
    "entrypoint": {"type": ["string", "array"], "minLength": 1, "minItems": 1, "items": {"type": "string"}},
    "workspace": _string(),
    "project": _string(),
    "searcher": _ref("searcher"),
    "hyperparameters": _defaulted(_ref("hyperparameters"), {}),
    "resources": _defaulted(_ref("resources"), {}),
    "max_restarts": _defaulted(_integer(0), 5),
    # Absent: the master's default storage, filled in by expansion.
    "checkpoint_storage": _ref("checkpoint_storage"),
    "checkpoint_policy": _defaulted({"enum": ["best", "all", "none"]}, "best"),
    "environment": _defaulted(_ref("environment"), {}),
    # experiment_seed has no schema default: the caller supplies it (e.g. the creation time).
    "reproducibility": _defaulted(
        _closed({"experiment_seed": _integer(0, MAX_EXPERIMENT_SEED)}),
        {},
    ),
    "data": _defaulted(_FREE_OBJECT, {}),
    "min_validation_period": _defaulted(_ref("length"), {"batches": 0}),
    "min_checkpoint_period": _defaulted(_ref("length"), {"batches": 0}),
    "preemption_timeout": _defaulted(_integer(0), None),
    # Accepted so that Determined configs load; Cairn does not act on them.
    "records_per_epoch": _defaulted(_integer(0, MAX_JSON_SAFE_INT), 0),
    "scheduling_unit": _defaulted(_integer(1), 100),
    "perform_initial_validation": _defaulted(_boolean(), False),
    "bind_mounts": _defaulted({"type": "array", "items": _BIND_MOUNT}, []),
    "debug": _defaulted(_boolean(), False),
    "profiling": _defaulted(
        {
            "type": "object",
            "properties": {
                "enabled": _defaulted(_boolean(), False),
                "begin_on_batch": _defaulted(_integer(0), 0),
                "end_after_batch": _integer(0),
                "sync_timings": _defaulted(_boolean(), True),
            },
        },
        {},
    ),
    # Horovod-era knobs, deprecated in Determined 0.38 but still read by its PyTorchTrial harness
    # (which fails on a missing key), so they get Determined's defaults.
    "optimizations": _defaulted(
        {
            "type": "object",
            "properties": {
                "aggregation_frequency": _defaulted(_integer(1), 1),
                "average_aggregated_gradients": _defaulted(_boolean(), True),
                "average_training_metrics": _defaulted(_boolean(), True),
                "gradient_compression": _defaulted(_boolean(), False),
                "grad_updates_size_file": _defaulted(_string(), None),
                "mixed_precision": _defaulted(_string(), "O0"),
                "tensor_fusion_threshold": _defaulted(_integer(1), 64),
                "tensor_fusion_cycle_time": _defaulted(_integer(1), 1),
                "auto_tune_tensor_fusion": _defaulted(_boolean(), False),
            },
        },
        {},
    ),
    "log_policies": _defaulted({"type": "array", "items": _FREE_OBJECT}, []),
    "retention_policy": {"type": "object", "properties": {"log_retention_days": _integer(-1)}},
    "integrations": _INTEGRATIONS,
    "security": _FREE_OBJECT,
    "slurm": _FREE_OBJECT,
    "pbs": _FREE_OBJECT,
    "tensorboard_storage": _FREE_OBJECT,
    "data_layer": _FREE_OBJECT,
    "internal": _FREE_OBJECT,
}

EXPERIMENT_SCHEMA: Schema = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "$id": "https://cairn.dev/schemas/experiment-config/v0.json",
    "title": "Cairn experiment configuration",
    "type": "object",
    "required": ["entrypoint", "searcher"],
    "properties": _EXPERIMENT_PROPERTIES,
    "additionalProperties": False,
    "allOf": [
        _when(
            {"required": ["searcher"], "properties": {"searcher": _key_is("name", "grid")}},
            {"properties": {"hyperparameters": _ref("grid_hyperparameters")}},
        )
    ],
    "definitions": {
        "length": _length(0),
        "hyperparameters": _HPARAMS,
        "hyperparameter": _HPARAM,
        "typed_hyperparameter": _TYPED_HPARAM,
        "grid_hyperparameters": _GRID_HPARAMS,
        "grid_hyperparameter": _GRID_HPARAM,
        "searcher": _SEARCHER,
        "resources": _RESOURCES,
        "checkpoint_storage": _CHECKPOINT_STORAGE,
        "environment": _ENVIRONMENT,
    },
}


def schema_default(*path: str) -> Any:
    """The default the schema gives the field at `path` ("resources", "slots_per_trial"): the one
    place defaults are written, for code that reads a config that might predate a field. Looks
    through $refs and the searcher's per-name branches; KeyError for a field without a default."""
    node: Schema = EXPERIMENT_SCHEMA
    for key in path:
        node = _resolve(node)
        found = _property(node, key)
        if found is None:
            raise KeyError(f"no field {'.'.join(path)} in the experiment schema")
        node = found
    node = _resolve(node)
    if "default" not in node:
        raise KeyError(f"{'.'.join(path)} has no default in the experiment schema")
    return node["default"]


def _resolve(node: Schema) -> Schema:
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        return {**EXPERIMENT_SCHEMA["definitions"][name], **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _property(node: Schema, key: str) -> Schema | None:
    properties = node.get("properties") or {}
    if key in properties:
        return properties[key]
    # Conditional branches (the searcher's per-name fields): the first that declares the key.
    for branch in [*(node.get("allOf") or []), *(node.get("oneOf") or []), *(node.get("anyOf") or [])]:
        for candidate in (branch.get("then") or {}, branch):
            found = _property(_resolve(candidate), key) if isinstance(candidate, dict) else None
            if found is not None:
                return found
    return None

"""Merging a config template under an experiment's own config, as Determined's master does.

Determined parses both into its typed experiment config and calls `schemas.Merge(config, template)`:
the config's values win, and each type decides how it merges. On the raw mappings Cairn stores,
that reads:
- a field the config does not give (absent or null) takes the template's value;
- mappings merge field by field, recursively (`data`, `resources`, `environment`, `ports`, ...);
- any other value the config gives is kept whole: scalars, and lists by default (a list is not
  concatenated: `entrypoint`, `add_capabilities`, a categorical's `vals`);
- lengths (`min_validation_period`, `searcher.max_length`, ...) are kept whole too, so that
  `{batches: 100}` over `{epochs: 1}` never becomes a length with two units;
and these fields have merge rules of their own:
- `bind_mounts` and `resources.devices`: the config's entries, then the template's whose container
  path the config does not mount already;
- `environment.proxy_ports`: likewise, keyed by `proxy_port`;
- `environment.environment_variables`: the template's variables, then the config's (per device
  flavour), so that the config's win where both set one (later assignments win);
- `environment.image`: per device flavour, the config's image where it names one;
- `labels`: the union, the config's first;
- `hyperparameters`: the union by name; a hyperparameter both give is the config's, whole, except
  that two nested groups merge by name again;
- `searcher` (by `name`) and `checkpoint_storage` (by `type`) are unions: the template's member
  fields merge in only when both name the same member (or the config names none); otherwise only
  the fields every member shares (the metric, the GC policy) come from the template;
- `log_policies`: the config's policies, then the template's whose name the config does not use
  (unnamed ones unless the config has the same policy).

Determined's documentation says lists concatenate; its code (above) keeps the config's list except
for the fields listed. Cairn follows the code. `environment.pod_spec` merges as a mapping here;
Determined applies Kubernetes' strategic merge to it, which Cairn's runtimes do not use.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

Path = tuple[str, ...]
Merge = Callable[[Any, Any], Any]

# The device flavours Determined keeps images and environment variables for; "gpu" is its legacy
# name for "cuda".
FLAVOURS = ("cpu", "cuda", "rocm")
# The fields every searcher and every checkpoint storage has, whatever its name or type.
SEARCHER_SHARED_FIELDS = frozenset(
    {"metric", "smaller_is_better", "source_trial_id", "source_checkpoint_uuid"}
)
STORAGE_SHARED_FIELDS = frozenset({"save_experiment_best", "save_trial_best", "save_trial_latest"})


def merge_template(config: Mapping[str, Any], template: Mapping[str, Any]) -> dict[str, Any]:
    """`config` merged over `template`: a new mapping; neither input is changed."""
    merged = _merge(dict(config), dict(template), ())
    assert isinstance(merged, dict)
    return merged


def _merge(config: Any, template: Any, path: Path) -> Any:
    if config is None:
        return copy.deepcopy(template)
    if template is None:
        return copy.deepcopy(config)
    special = _SPECIAL.get(path)
    if special is not None:
        return special(config, template)
    if isinstance(config, dict) and isinstance(template, dict):
        return _merge_fields(config, template, path)
    return copy.deepcopy(config)


def _merge_fields(config: dict[str, Any], template: dict[str, Any], path: Path) -> dict[str, Any]:
    merged = {key: _merge(value, template.get(key), (*path, key)) for key, value in config.items()}
    for key, value in template.items():
        if key not in config:
            merged[key] = copy.deepcopy(value)
    return merged


def _config_whole(config: Any, template: Any) -> Any:
    return copy.deepcopy(config)


def _append_missing(key_of: Callable[[Any], Any]) -> Merge:
    """The config's entries, then the template's whose key no config entry has."""

    def merge(config: Any, template: Any) -> Any:
        if not (isinstance(config, list) and isinstance(template, list)):
            return copy.deepcopy(config)
        taken = [key_of(entry) for entry in config]
        added = [entry for entry in template if key_of(entry) is None or key_of(entry) not in taken]
        return copy.deepcopy([*config, *added])

    return merge


def _mount_container_path(entry: Any) -> Any:
    return entry.get("container_path") if isinstance(entry, dict) else None


def _device_container_path(entry: Any) -> Any:
    # A device is a mapping or Docker's "host_path:container_path[:mode]".
    if isinstance(entry, str):
        fields = entry.split(":")
        return fields[1] if len(fields) in (2, 3) else None
    return _mount_container_path(entry)


def _proxy_port(entry: Any) -> Any:
    return entry.get("proxy_port") if isinstance(entry, dict) else None


def _by_flavour(value: Any) -> dict[str, Any] | None:
    """A per-flavour mapping as Determined reads it: one value for every flavour, or the flavours a
    mapping names (`gpu` standing for `cuda` when `cuda` is not given). None if neither."""
    if isinstance(value, dict):
        given = {flavour: value[flavour] for flavour in FLAVOURS if value.get(flavour) is not None}
        if "cuda" not in given and value.get("gpu") is not None:
            given["cuda"] = value["gpu"]
        return given
    if isinstance(value, (str, list)):
        return dict.fromkeys(FLAVOURS, value)
    return None


def _merge_environment_variables(config: Any, template: Any) -> Any:
    if isinstance(config, list) and isinstance(template, list):
        return copy.deepcopy([*template, *config])
    config_lists, template_lists = _by_flavour(config), _by_flavour(template)
    if config_lists is None or template_lists is None:
        return copy.deepcopy(config)
    merged: dict[str, Any] = {}
    for flavour in FLAVOURS:
        template_items, config_items = template_lists.get(flavour, []), config_lists.get(flavour, [])
        if not (isinstance(template_items, list) and isinstance(config_items, list)):
            return copy.deepcopy(config)
        merged[flavour] = copy.deepcopy([*template_items, *config_items])
    return merged


def _merge_image(config: Any, template: Any) -> Any:
    if not isinstance(config, dict):
        return copy.deepcopy(config)  # one image for every flavour: nothing left to fill
    config_images, template_images = _by_flavour(config), _by_flavour(template)
    if config_images is None or template_images is None:
        return copy.deepcopy(config)
    return copy.deepcopy({**template_images, **config_images})


def _merge_labels(config: Any, template: Any) -> Any:
    if not (isinstance(config, list) and isinstance(template, list)):
        return copy.deepcopy(config)
    merged: list[Any] = []
    for label in [*config, *template]:
        if label not in merged:
            merged.append(label)
    return copy.deepcopy(merged)


def _is_group(hparam: Any) -> bool:
    # A mapping without `type` is a group of nested hyperparameters; with it, one hyperparameter.
    return isinstance(hparam, dict) and "type" not in hparam


def _merge_hyperparameters(config: Any, template: Any) -> Any:
    if not (isinstance(config, dict) and isinstance(template, dict)):
        return copy.deepcopy(config)
    merged: dict[str, Any] = {}
    for name, hparam in config.items():
        other = template.get(name)
        if name in template and _is_group(hparam) and _is_group(other):
            merged[name] = _merge_hyperparameters(hparam, other)
        else:
            merged[name] = copy.deepcopy(hparam)  # even null: an explicit const
    for name, hparam in template.items():
        if name not in config:
            merged[name] = copy.deepcopy(hparam)
    return merged


def _merge_union(member_key: str, shared_fields: frozenset[str], path: Path) -> Merge:
    def merge(config: Any, template: Any) -> Any:
        if not (isinstance(config, dict) and isinstance(template, dict)):
            return copy.deepcopy(config)
        member = config.get(member_key)
        if member is None or member == template.get(member_key):
            return _merge_fields(config, template, path)
        shared = {key: value for key, value in template.items() if key in shared_fields}
        return _merge_fields(config, shared, path)

    return merge


def _policy_name(policy: Any) -> Any:
    return policy.get("name") if isinstance(policy, dict) else None


def _merge_log_policies(config: Any, template: Any) -> Any:
    if not (isinstance(config, list) and isinstance(template, list)):
        return copy.deepcopy(config)
    names = {name for name in map(_policy_name, config) if isinstance(name, str)}
    merged = copy.deepcopy(config)
    for policy in template:
        name = _policy_name(policy)
        if isinstance(name, str):
            if name not in names:
                names.add(name)
                merged.append(copy.deepcopy(policy))
        elif policy not in merged:
            merged.append(copy.deepcopy(policy))
    return merged


_SPECIAL: dict[Path, Merge] = {
    ("bind_mounts",): _append_missing(_mount_container_path),
    ("resources", "devices"): _append_missing(_device_container_path),
    ("environment", "proxy_ports"): _append_missing(_proxy_port),
    ("environment", "environment_variables"): _merge_environment_variables,
    ("environment", "image"): _merge_image,
    ("labels",): _merge_labels,
    ("hyperparameters",): _merge_hyperparameters,
    ("searcher",): _merge_union("name", SEARCHER_SHARED_FIELDS, ("searcher",)),
    ("checkpoint_storage",): _merge_union("type", STORAGE_SHARED_FIELDS, ("checkpoint_storage",)),
    ("log_policies",): _merge_log_policies,
    ("min_validation_period",): _config_whole,
    ("min_checkpoint_period",): _config_whole,
    ("searcher", "max_length"): _config_whole,
}

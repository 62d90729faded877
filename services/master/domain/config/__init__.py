"""Experiment configuration: parse the YAML, validate it against Cairn's JSON Schema, expand defaults.

Cairn accepts Determined's experiment config (schemas/expconf/v0) for the parts it runs, and accepts
without acting on the keys it ignores, so Determined configs load unchanged. Where Cairn differs:
- `entrypoint` is required (an experiment without one cannot run);
- searchers: single, random, grid, adaptive_asha, async_halving and custom (`address` of a process
  serving Cairn's SearcherService, or a registered `plugin`); Determined's removed adaptive,
  adaptive_simple and sync_halving are refused by name;
- `stop_once` on the halving searchers defaults to true, which is Determined 0.38's stopping-only
  behaviour; `stop_once: false` selects Cairn's promotion mode;
- checkpoint storage: shared_fs, directory and s3 (gcs and azure are refused for now);
- a config without a name is called "experiment-<8 hex digits>".
As in Determined, `field: null` on a typed field means "not given", unknown keys are refused at
every level (with the closest known key suggested), and expansion writes implicit consts out as
`{type: const, val: ...}`.

Every problem is reported at once, sorted by field path, as "<field path>: <what is wrong>".
"""

from services.master.domain.config.errors import ConfigError
from services.master.domain.config.expansion import ConfigDefaults, expand_config
from services.master.domain.config.grid import grid_size
from services.master.domain.config.validation import validate_config
from services.master.domain.config.view import ExperimentConfigView, config_view
from services.master.domain.config.yaml_text import parse_config_text

__all__ = [
    "ConfigDefaults",
    "ConfigError",
    "ExperimentConfigView",
    "config_view",
    "expand_config",
    "grid_size",
    "parse_config_text",
    "validate_config",
]

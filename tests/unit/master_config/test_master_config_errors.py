"""validate_config: each bad config gets exactly the expected messages, each naming its field."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from services.master.domain.config import validate_config
from services.master.domain.config.schema import ENV_RULES

Problems = Callable[[str], list[str]]

VALID_HEAD = "entrypoint: python3 train.py\n"
GRID_COUNT = "grid search needs a count for int, double and log hyperparameters"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # --- searcher ranges and required fields
        (
            VALID_HEAD + "searcher: {name: random, metric: loss, max_trials: -1}",
            ["searcher.max_trials: must be >= 1"],
        ),
        (VALID_HEAD + "searcher: {name: random, metric: loss}", ["searcher.max_trials: required"]),
        (VALID_HEAD + "searcher: {name: single}", ["searcher.metric: required"]),
        (VALID_HEAD + "searcher: {metric: loss}", ["searcher.name: required"]),
        (VALID_HEAD + "max_restarts: 1", ["searcher: required"]),
        (
            VALID_HEAD + "searcher: {name: random, metric: loss, max_trials: 2, max_concurrent_trials: -1}",
            ["searcher.max_concurrent_trials: must be >= 0"],
        ),
        (
            VALID_HEAD + "searcher: {name: adaptive_asha, metric: loss, max_trials: 4}",
            ["searcher.max_time: required", "searcher.time_metric: required"],
        ),
        (
            VALID_HEAD + "searcher: {name: adaptive_asha, metric: loss, max_trials: 4, time_metric: batches}",
            ["searcher.max_time: required"],
        ),
        (
            VALID_HEAD
            + "searcher: {name: adaptive_asha, metric: l, max_trials: 4, time_metric: b, max_time: 8,"
            " divisor: 1}",
            ["searcher.divisor: must be > 1"],
        ),
        (
            VALID_HEAD
            + "searcher: {name: adaptive_asha, metric: l, max_trials: 4, time_metric: b, max_time: 8,"
            " mode: fast, max_rungs: 0}",
            [
                "searcher.max_rungs: must be >= 1",
                "searcher.mode: must be one of aggressive, standard, conservative",
            ],
        ),
        (
            VALID_HEAD + "searcher: {name: async_halving, metric: l, time_metric: b, max_time: 8}",
            ["searcher.max_trials: required", "searcher.num_rungs: required"],
        ),
        (
            VALID_HEAD + "searcher: {name: single, metric: l, max_length: {batches: 0}}",
            ["searcher.max_length.batches: must be >= 1"],
        ),
        (
            VALID_HEAD + "searcher: {name: single, metric: l, max_trials: 3}",
            ["searcher.max_trials: unknown field"],
        ),
        (
            VALID_HEAD + "searcher: {name: random, metric: l, max_trails: 3}",
            [
                "searcher.max_trails: unknown field (did you mean 'max_trials'?)",
                "searcher.max_trials: required",
            ],
        ),
        (
            VALID_HEAD
            + "searcher: {name: single, metric: l, source_trial_id: 3, source_checkpoint_uuid: abc}",
            ["searcher.source_checkpoint_uuid: cannot be given together with searcher.source_trial_id"],
        ),
        # --- searcher names
        (
            VALID_HEAD + "searcher: {name: adaptive_simple, metric: loss, max_trials: 4}",
            ["searcher.name: 'adaptive_simple' was removed from Determined and is not supported"],
        ),
        (
            VALID_HEAD + "searcher: {name: adaptive, metric: loss}",
            ["searcher.name: 'adaptive' was removed from Determined and is not supported"],
        ),
        (
            VALID_HEAD + "searcher: {name: sync_halving, metric: loss}",
            ["searcher.name: 'sync_halving' was removed from Determined and is not supported"],
        ),
        (
            VALID_HEAD + "searcher: {name: bayesian, metric: loss}",
            ["searcher.name: must be one of single, random, grid, adaptive_asha, async_halving, custom"],
        ),
        (VALID_HEAD + "searcher: {name: 3, metric: loss}", ["searcher.name: must be a string"]),
        (
            VALID_HEAD + "searcher: {name: custom, metric: loss}",
            ["searcher.address: required for a custom searcher (or searcher.plugin)"],
        ),
        (
            VALID_HEAD + "searcher: {name: custom, metric: loss, address: 'h:1', plugin: p}",
            ["searcher.plugin: cannot be given together with searcher.address"],
        ),
        (
            VALID_HEAD + "searcher: {name: custom, metric: loss, address: searcher-host}",
            ["searcher.address: must be host:port"],
        ),
        # --- grid
        (
            VALID_HEAD
            + "searcher: {name: grid, metric: loss}\nhyperparameters: {lr: {type: double, minval: 0,"
            " maxval: 1}}",
            [f"hyperparameters.lr.count: {GRID_COUNT}"],
        ),
        (
            VALID_HEAD + "searcher: {name: grid, metric: loss}\nhyperparameters:\n  opt:\n    lr: {type: log,"
            " minval: -3, maxval: -1, base: 10}\n    n: {type: int, minval: 1, maxval: 4, count: 2}\n"
            "    c: {type: categorical, vals: [a, b]}\n    k: 3",
            [f"hyperparameters.opt.lr.count: {GRID_COUNT}"],
        ),
        # --- hyperparameters
        (
            VALID_HEAD
            + "searcher: {name: single, metric: l}\nhyperparameters: {optimizer: {lr: {type: float}}}",
            ["hyperparameters.optimizer.lr.type: must be one of const, int, double, log, categorical"],
        ),
        (
            VALID_HEAD + "searcher: {name: single, metric: l}\nhyperparameters: {n: {type: int, minval: 1.5,"
            " maxval: 4}}",
            ["hyperparameters.n.minval: must be an integer"],
        ),
        (
            VALID_HEAD + "searcher: {name: single, metric: l}\nhyperparameters: {n: {type: int, minval: 4,"
            " maxval: 4}, d: {type: double, minval: 1, maxval: 0.5}}",
            [
                "hyperparameters.d.maxval: must be greater than minval",
                "hyperparameters.n.maxval: must be greater than minval",
            ],
        ),
        (
            VALID_HEAD
            + "searcher: {name: single, metric: l}\nhyperparameters: {g: {h: {c: {type: categorical,"
            " vals: []}}}}",
            ["hyperparameters.g.h.c.vals: must not be empty"],
        ),
        (
            VALID_HEAD + "searcher: {name: single, metric: l}\nhyperparameters: {b: {type: log, minval: 1,"
            " maxval: 2, base: 0, count: 0}}",
            ["hyperparameters.b.base: must be > 0", "hyperparameters.b.count: must be >= 1"],
        ),
        (
            VALID_HEAD + "searcher: {name: single, metric: l}\nhyperparameters: {b: {type: log, minval: 1,"
            " maxval: 2}, c: {type: const}, d: {type: double, min: 0, maxval: 1}}",
            [
                "hyperparameters.b.base: required",
                "hyperparameters.c.val: required",
                "hyperparameters.d.min: unknown field (did you mean 'minval'?)",
                "hyperparameters.d.minval: required",
            ],
        ),
        # --- wrong types
        (
            VALID_HEAD + "searcher: {name: single, metric: l}\nresources: {slots_per_trial: two}",
            ["resources.slots_per_trial: must be an integer"],
        ),
        (
            VALID_HEAD + "searcher: {name: single, metric: l}\nresources: {slots_per_trial: true}",
            ["resources.slots_per_trial: must be an integer"],
        ),
        (
            VALID_HEAD + "searcher: {name: single, metric: 5, smaller_is_better: 'yes'}",
            ["searcher.metric: must be a string", "searcher.smaller_is_better: must be a boolean"],
        ),
        (
            "entrypoint: {cmd: x}\nsearcher: {name: single, metric: l}",
            ["entrypoint: must be a string or a list"],
        ),
        (
            "entrypoint: [python3, 3]\nsearcher: {name: single, metric: l}",
            ["entrypoint[1]: must be a string"],
        ),
        ("entrypoint: []\nsearcher: {name: single, metric: l}", ["entrypoint: must not be empty"]),
        (VALID_HEAD + "searcher: [single]", ["searcher: must be a mapping"]),
        (VALID_HEAD + "searcher: {name: single, metric: l}\nlabels: a", ["labels: must be a list"]),
        (
            VALID_HEAD + "searcher: {name: single, metric: l}\nhyperparameters: [1]",
            ["hyperparameters: must be a mapping"],
        ),
        (VALID_HEAD + "searcher: {name: single, metric: l}\ndata: 3", ["data: must be a mapping"]),
        # --- resources
        (
            VALID_HEAD
            + "searcher: {name: single, metric: l}\nresources: {priority: 0, weight: 0, max_slots: 0,"
            " slots_per_trial: -1}",
            [
                "resources.max_slots: must be >= 1",
                "resources.priority: must be >= 1",
                "resources.slots_per_trial: must be >= 0",
                "resources.weight: must be > 0",
            ],
        ),
        (
            VALID_HEAD + "searcher: {name: single, metric: l}\nresources: {priority: 100, shm_size: lots}",
            [
                "resources.priority: must be <= 99",
                "resources.shm_size: must be a memory size such as 4G or 512Mi",
            ],
        ),
        # --- checkpoint storage
        (
            VALID_HEAD + "searcher: {name: single, metric: l}\ncheckpoint_storage: {type: gcs, bucket: b}",
            ["checkpoint_storage.type: 'gcs' is not supported by Cairn yet"],
        ),
        (
            VALID_HEAD
            + "searcher: {name: single, metric: l}\ncheckpoint_storage: {type: azure, container: c}",
            ["checkpoint_storage.type: 'azure' is not supported by Cairn yet"],
        ),
        (
            VALID_HEAD + "searcher: {name: single, metric: l}\ncheckpoint_storage: {type: shared_fs,"
            " save_trial_best: -1}",
            ["checkpoint_storage.host_path: required", "checkpoint_storage.save_trial_best: must be >= 0"],
        ),
        (
            VALID_HEAD
            + "searcher: {name: single, metric: l}\ncheckpoint_storage: {type: s3, bucket: b, region: x}",
            ["checkpoint_storage.region: unknown field"],
        ),
        (
            VALID_HEAD + "searcher: {name: single, metric: l}\ncheckpoint_storage: {type: directory}",
            ["checkpoint_storage.container_path: required"],
        ),
        (
            VALID_HEAD + "searcher: {name: single, metric: l}\ncheckpoint_storage: {host_path: /x}",
            ["checkpoint_storage.type: required"],
        ),
        (
            VALID_HEAD + "searcher: {name: single, metric: l}\ncheckpoint_policy: latest",
            ["checkpoint_policy: must be one of best, all, none"],
        ),
        # --- environment
        (
            VALID_HEAD
            + "searcher: {name: single, metric: l}\nenvironment: {environment_variables: [A=1, B, =C]}",
            [
                "environment.environment_variables[1]: must have the form KEY=VALUE" + ENV_RULES,
                "environment.environment_variables[2]: must have the form KEY=VALUE" + ENV_RULES,
            ],
        ),
        (
            VALID_HEAD
            + "searcher: {name: single, metric: l}\nenvironment: {environment_variables: {cpu: [X]},"
            " image: {tpu: img}}",
            [
                "environment.environment_variables.cpu[0]: must have the form KEY=VALUE" + ENV_RULES,
                "environment.image.tpu: unknown field (did you mean 'gpu'?)",
            ],
        ),
        # --- lengths, seeds, timeouts
        (
            VALID_HEAD
            + "searcher: {name: single, metric: l}\nmin_validation_period: {batches: 10, epochs: 1}",
            ["min_validation_period: must have exactly one of batches, records, epochs"],
        ),
        (
            VALID_HEAD + "searcher: {name: single, metric: l}\nmin_checkpoint_period: {steps: 10}",
            ["min_checkpoint_period.steps: unknown field"],
        ),
        (
            VALID_HEAD + "searcher: {name: single, metric: l}\nmin_checkpoint_period: {}",
            ["min_checkpoint_period: must have exactly one of batches, records, epochs"],
        ),
        (
            VALID_HEAD + "searcher: {name: single, metric: l}\nreproducibility: {experiment_seed: -1}\n"
            "preemption_timeout: -5",
            ["preemption_timeout: must be >= 0", "reproducibility.experiment_seed: must be >= 0"],
        ),
        # --- unknown top-level keys
        (
            VALID_HEAD + "searcher: {name: single, metric: l}\nhyperparamters: {}",
            ["hyperparamters: unknown field (did you mean 'hyperparameters'?)"],
        ),
        (
            VALID_HEAD + "searcher: {name: single, metric: l}\ndatta: {}\nfoo: 1",
            ["datta: unknown field (did you mean 'data'?)", "foo: unknown field"],
        ),
        (
            "entrypiont: x\nsearcher: {name: single, metric: l}",
            ["entrypiont: unknown field (did you mean 'entrypoint'?)", "entrypoint: required"],
        ),
    ],
)
def test_bad_config_gets_exactly_these_problems(
    text: str, expected: list[str], problems_of: Problems
) -> None:
    assert problems_of(text) == expected


def test_every_problem_is_reported_together_sorted_by_path(problems_of: Problems) -> None:
    text = """
hyperparameters:
  lr: {type: double, minval: 0.1, maxval: 0.01}
  layers: {type: categorical, vals: []}
searcher: {name: grid, metric: 3, max_concurrent_trials: -1, bogus: 1}
resources: {slots_per_trial: -2}
checkpoint_storage: {type: gcs}
max_restarts: many
unknownkey: 1
"""
    assert problems_of(text) == [
        "checkpoint_storage.type: 'gcs' is not supported by Cairn yet",
        "entrypoint: required",
        "hyperparameters.layers.vals: must not be empty",
        "hyperparameters.lr.count: grid search needs a count for int, double and log hyperparameters",
        "hyperparameters.lr.maxval: must be greater than minval",
        "max_restarts: must be an integer",
        "resources.slots_per_trial: must be >= 0",
        "searcher.bogus: unknown field",
        "searcher.max_concurrent_trials: must be >= 0",
        "searcher.metric: must be a string",
        "unknownkey: unknown field",
    ]


def test_a_wrong_type_is_reported_once(problems_of: Problems) -> None:
    # "three" fails both the type and (were it a number) the minimum: one message is enough.
    assert problems_of(VALID_HEAD + "searcher: {name: random, metric: l, max_trials: three}") == [
        "searcher.max_trials: must be an integer"
    ]


def test_a_top_level_that_is_not_a_mapping_is_refused() -> None:
    assert validate_config([1, 2]) == ["config: must be a mapping"]  # type: ignore[arg-type]


def test_a_valid_config_has_no_problems(problems_of: Problems) -> None:
    assert problems_of(VALID_HEAD + "searcher: {name: single, metric: loss}") == []

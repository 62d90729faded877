"""Determined's tutorial configs (examples/tutorials/core_api*, mnist_pytorch) load and expand unchanged."""

from __future__ import annotations

import pytest

from services.master.domain.config import (
    ConfigDefaults,
    ExperimentConfigView,
    expand_config,
    parse_config_text,
)

CORE_API_STAGE = """
name: core-api-stage-{stage}
entrypoint: python3 {stage}_{script}.py
searcher:
  name: single
  metric: x
max_restarts: 0
"""

HPSEARCH = """
name: core-api-stage-3
entrypoint: python3 3_hpsearch.py
hyperparameters:
  increment_by:
    type: int
    minval: 1
    maxval: 8
searcher:
   name: adaptive_asha
   metric: x
   max_trials: 10
   time_metric: batches
   max_time: 100
max_restarts: 0
"""

DISTRIBUTED = """
name: core-api-stage-4
entrypoint: python3 4_distributed.py launcher
resources:
  slots_per_trial: 8
hyperparameters:
  increment_by:
    type: int
    minval: 1
    maxval: 8
searcher:
  name: single
  metric: x
max_restarts: 0
"""

PROFILING = """
name: core-api-stage-5
entrypoint: python3 5_profiling.py
profiling:
  enabled: true
  begin_on_batch: 0
  end_after_batch: 10
  sync_timings: false
searcher:
  name: single
  metric: x
  max_length: 1
resources:
  slots_per_trial: 1
max_restarts: 0
"""

MNIST_HPARAMS = """
hyperparameters:
  global_batch_size: 64
  learning_rate: {type: double, minval: .0001, maxval: 1.0}
  n_filters1: {type: int, minval: 8, maxval: 64}
  n_filters2: {type: int, minval: 8, maxval: 72}
  dropout1: {type: double, minval: .2, maxval: .8}
  dropout2: {type: double, minval: .2, maxval: .8}
"""

MNIST_ADAPTIVE = (
    """
name: coreapi_mnist_tutorial_adaptive_search
description: Use an Adaptive ASHA hyperparameter search to optimize the model.
max_restarts: 0
records_per_epoch: 60000
searcher:
  name: adaptive_asha
  metric: test_loss
  smaller_is_better: true
  max_trials: 50
  time_metric: epochs
  max_time: 20
entrypoint: python3 model_def_adaptive.py --epochs 20
"""
    + MNIST_HPARAMS
)

MNIST_DISTRIBUTED = (
    """
name: coreapi_mnist_tutorial_distributed
entrypoint: python3 -m determined.launch.torch_distributed python3 model_def_distributed.py
resources:
  slots_per_trial: 4
searcher: {name: single, metric: test_loss}
max_restarts: 0
"""
    + MNIST_HPARAMS
)

MNIST_TRIAL_CONST = """
name: mnist_pytorch_const
hyperparameters:
  learning_rate: 1.0
  n_filters1: 32
  n_filters2: 64
  dropout1: 0.25
  dropout2: 0.5
searcher:
  name: single
  metric: validation_loss
  smaller_is_better: true
entrypoint: python3 train.py --epochs 1
"""

MNIST_DIST_RANDOM = (
    """
name: mnist_pytorch_dist_random_search
data:
  url: https://example.com/pytorch_mnist.tar.gz
resources:
  slots_per_trial: 2
searcher:
  name: random
  metric: accuracy
  smaller_is_better: true
  max_trials: 2
  max_length:
    batches: 937
entrypoint: model_def:MNistTrial
"""
    + MNIST_HPARAMS
)

TUTORIALS = {
    "0_start": CORE_API_STAGE.format(stage=0, script="start"),
    "1_metrics": CORE_API_STAGE.format(stage=1, script="metrics"),
    "2_checkpoints": CORE_API_STAGE.format(stage=2, script="checkpoints"),
    "3_hpsearch": HPSEARCH,
    "4_distributed": DISTRIBUTED,
    "5_profiling": PROFILING,
    "mnist_adaptive": MNIST_ADAPTIVE,
    "mnist_distributed": MNIST_DISTRIBUTED,
    "mnist_trial_const": MNIST_TRIAL_CONST,
    "mnist_dist_random": MNIST_DIST_RANDOM,
}


@pytest.mark.parametrize("text", TUTORIALS.values(), ids=TUTORIALS.keys())
def test_tutorial_config_expands(text: str, defaults: ConfigDefaults) -> None:
    config = expand_config(parse_config_text(text), defaults)
    view = ExperimentConfigView.from_expanded(config)
    assert view.entrypoint_is_shell
    assert view.name == parse_config_text(text)["name"]


def test_stage_3_reads_as_an_asha_search_over_one_int(defaults: ConfigDefaults) -> None:
    view = ExperimentConfigView.from_expanded(expand_config(parse_config_text(HPSEARCH), defaults))
    assert (view.searcher_name, view.searcher_metric, view.smaller_is_better, view.max_trials) == (
        "adaptive_asha",
        "x",
        True,
        10,
    )
    assert view.hyperparameters == {"increment_by": {"type": "int", "minval": 1, "maxval": 8}}
    assert view.max_restarts == 0
    assert view.searcher["stop_once"] is True


def test_stage_4_asks_for_eight_slots(defaults: ConfigDefaults) -> None:
    view = ExperimentConfigView.from_expanded(expand_config(parse_config_text(DISTRIBUTED), defaults))
    assert view.slots_per_trial == 8
    assert view.entrypoint == ["python3 4_distributed.py launcher"]

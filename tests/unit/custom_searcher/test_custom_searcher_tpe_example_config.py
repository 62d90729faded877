"""examples/custom_searcher/tpe/digits-tpe.yaml: the master accepts it, and the TPE searcher runs the
search the master would open for it."""

from __future__ import annotations

import json
from typing import Any

from cairn.searcher.v1 import searcher_pb2 as pb
from cairn.wire import python_to_struct
from services.master.domain.config import ConfigDefaults, expand_config, parse_config_text, validate_config
from tests.unit.custom_searcher.conftest import REPO_ROOT, SearcherProcess
from tests.unit.custom_searcher.tpe_search_driver import CALL_TIMEOUT_S, SearchDriver, hparams_of

CONFIG = REPO_ROOT / "examples" / "custom_searcher" / "tpe" / "digits-tpe.yaml"


def expanded_config() -> dict[str, Any]:
    raw = parse_config_text(CONFIG.read_text())
    assert validate_config(raw) == []
    defaults = ConfigDefaults(
        checkpoint_storage={"type": "shared_fs", "host_path": "/tmp"},
        resource_pool="default",
        experiment_seed=1,
    )
    return expand_config(raw, defaults)


def test_the_example_config_runs_train_py_with_tpe() -> None:
    config = expanded_config()
    assert config["entrypoint"] == "python3 train.py"
    assert (REPO_ROOT / "examples" / "digits" / "train.py").is_file()
    searcher = config["searcher"]
    assert (searcher["name"], searcher["address"]) == ("custom", "127.0.0.1:9100")
    assert (searcher["metric"], searcher["smaller_is_better"]) == ("validation_accuracy", False)
    assert (searcher["max_trials"], searcher["max_length"]) == (12, {"epochs": 12})
    kinds = {name: spec["type"] for name, spec in config["hyperparameters"].items()}
    assert kinds == {
        "learning_rate": "log",
        "hidden_size": "int",
        "dropout": "double",
        "batch_size": "categorical",
    }


def test_the_searcher_runs_the_example_search(tpe_searcher: SearcherProcess) -> None:
    config = expanded_config()
    # As the master builds it (services/master/domain/experiments/creation.py).
    spec = pb.SearchSpec(
        searcher=python_to_struct(config["searcher"]),
        hyperparameters=python_to_struct(config["hyperparameters"]),
        seed=config["reproducibility"]["experiment_seed"],
    )
    preview = tpe_searcher.stub.PreviewSearch(pb.PreviewSearchRequest(spec=spec), timeout=CALL_TIMEOUT_S)
    assert len(preview.trials) == 4 and preview.unit == "epochs"

    driver = SearchDriver(tpe_searcher.stub, spec)
    driver.start()
    driver.run_to_shutdown(lambda h: 1.0 - abs(h["learning_rate"] - 0.01))
    assert len(driver.created) == 12
    assert driver.last is not None
    assert all(t["status"] == "complete" for t in json.loads(driver.last.snapshot.state)["trials"])
    for create in driver.created:
        hparams = hparams_of(create)
        assert 10**-3.5 <= hparams["learning_rate"] <= 10**-1.5
        assert hparams["hidden_size"] in range(16, 129)
        assert 0.0 <= hparams["dropout"] <= 0.5
        assert hparams["batch_size"] in (16, 32, 64)

"""Specs the TPE searcher refuses: INVALID_ARGUMENT naming the field, from StartSession and
PreviewSearch alike, and no session left behind."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from cairn.searcher.v1 import searcher_pb2 as pb
from tests.unit.custom_searcher.conftest import SearcherProcess
from tests.unit.custom_searcher.tpe_search_driver import (
    CALL_TIMEOUT_S,
    SearchDriver,
    hparams_of,
    rpc_error,
    tpe_spec,
)

X = {"type": "double", "minval": 0.0, "maxval": 1.0}

BAD_SEARCHER: list[tuple[dict[str, Any], str]] = [
    ({"metric": None}, "searcher.metric: required"),
    ({"metric": 3}, "searcher.metric: must be a metric name"),
    ({"max_trials": None}, "searcher.max_trials: required"),
    ({"max_trials": 0}, "searcher.max_trials: must be >= 1"),
    ({"max_trials": 2.5}, "searcher.max_trials: must be an integer"),
    ({"max_concurrent_trials": -1}, "searcher.max_concurrent_trials: must be >= 0"),
    ({"n_startup_trials": -2}, "searcher.n_startup_trials: must be >= 0"),
    ({"smaller_is_better": "yes"}, "searcher.smaller_is_better: must be true or false"),
    ({"max_length": {"steps": 3}}, "searcher.max_length: must be an integer or one of"),
]

BAD_HPARAMS: list[tuple[dict[str, Any], str]] = [
    (
        {"x": {"type": "double", "minval": 1.0, "maxval": 1.0}},
        "hyperparameters.x.minval: must be less than maxval",
    ),
    ({"x": {"type": "int", "minval": 5, "maxval": 2}}, "hyperparameters.x.minval: must be less than maxval"),
    ({"x": {"type": "int", "minval": 0.5, "maxval": 2}}, "hyperparameters.x.minval: must be an integer"),
    ({"x": {"type": "double", "maxval": 2}}, "hyperparameters.x.minval: required"),
    ({"x": {"type": "normal", "mean": 0}}, "hyperparameters.x.type: unsupported type 'normal'"),
    (
        {"opt": {"lr": {"type": "log", "minval": -1, "maxval": -3, "base": 10}}},
        "hyperparameters.opt.lr.minval",
    ),
    ({"lr": {"type": "log", "minval": -4, "maxval": -1}}, "hyperparameters.lr.base: required"),
    (
        {"lr": {"type": "log", "minval": -4, "maxval": -1, "base": 1}},
        "hyperparameters.lr.base: must be > 0 and not 1",
    ),
    ({"lr": {"type": "log", "minval": 1, "maxval": 400, "base": 10}}, "hyperparameters.lr: base ** minval"),
    ({"c": {"type": "categorical", "vals": []}}, "hyperparameters.c.vals: must be a non-empty list"),
    ({"k": {"type": "const"}}, "hyperparameters.k.val: required"),
    ({"a.b": X, "a": {"b": X}}, "its dotted name 'a.b' is also that of"),
]


def assert_refused(searcher: SearcherProcess, spec: pb.SearchSpec, message: str) -> None:
    driver = SearchDriver(searcher.stub, spec)
    error = rpc_error(driver.start)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in str(error.details())
    preview = rpc_error(
        lambda: searcher.stub.PreviewSearch(pb.PreviewSearchRequest(spec=spec), timeout=CALL_TIMEOUT_S)
    )
    assert preview.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in str(preview.details())
    # Nothing was opened.
    closed = rpc_error(lambda: driver.trial_created("any"))
    assert closed.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize(("searcher_fields", "message"), BAD_SEARCHER)
def test_a_bad_searcher_section_is_refused(
    tpe_searcher: SearcherProcess, searcher_fields: dict[str, Any], message: str
) -> None:
    # tpe_spec leaves out the fields given as None: those are missing.
    assert_refused(tpe_searcher, tpe_spec({"x": X}, **searcher_fields), message)


@pytest.mark.parametrize(("hparams", "message"), BAD_HPARAMS)
def test_a_bad_hyperparameter_is_refused(
    tpe_searcher: SearcherProcess, hparams: dict[str, Any], message: str
) -> None:
    assert_refused(tpe_searcher, tpe_spec(hparams), message)


def test_a_start_without_a_session_id_is_refused(tpe_searcher: SearcherProcess) -> None:
    request = pb.StartSessionRequest(session_id="", spec=tpe_spec())
    error = rpc_error(lambda: tpe_searcher.stub.StartSession(request, timeout=CALL_TIMEOUT_S))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "session_id: required" in str(error.details())


def test_a_space_of_constants_and_other_tools_settings_is_fine(tpe_searcher: SearcherProcess) -> None:
    spec = tpe_spec({"batch": 32, "tags": ["a", "b"], "nested": {}}, plugin="tpe", other_tool={"setting": 1})
    driver = SearchDriver(tpe_searcher.stub, spec)
    driver.start()
    assert len(driver.created) == 2
    assert hparams_of(driver.created[0]) == {"batch": 32, "tags": ["a", "b"], "nested": {}}

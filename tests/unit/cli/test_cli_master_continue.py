"""`cairn experiment continue --config KEY=VALUE` and `cairn master config|logs` rendering."""

from __future__ import annotations

import click
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from cairn.api.v1 import master_pb2, trial_pb2
from cairn.cli.config_overrides import apply_overrides
from cairn.cli.master import master_log_line, whole_numbers


def test_overrides_set_dotted_fields_as_yaml_values_over_the_file() -> None:
    base = {"searcher": {"max_length": {"batches": 10}, "metric": "loss"}, "labels": ["a"]}
    result = apply_overrides(
        base, ["searcher.max_length.batches=200", "max_restarts=3", "labels=[x, y]", "description=two words"]
    )
    assert result == {
        "searcher": {"max_length": {"batches": 200}, "metric": "loss"},
        "labels": ["x", "y"],
        "max_restarts": 3,
        "description": "two words",
    }
    assert base["searcher"] == {"max_length": {"batches": 10}, "metric": "loss"}  # untouched


@pytest.mark.parametrize("bad", ["no-equals", "a..b=1", "=1", "x=[unclosed"])
def test_bad_overrides_are_refused_naming_the_option(bad: str) -> None:
    with pytest.raises(click.BadParameter):
        apply_overrides({}, [bad])


def test_master_log_lines_and_config_numbers_read_naturally() -> None:
    entry = master_pb2.LogEntry(
        id=3, message="master ready grpc_port=8090", level=trial_pb2.LOG_LEVEL_WARNING, timestamp=Timestamp()
    )
    assert master_log_line(entry).endswith("[WARNING] master ready grpc_port=8090")
    assert whole_numbers({"port": 8080.0, "t": [0.05, 2.0]}) == {"port": 8080, "t": [0.05, 2]}

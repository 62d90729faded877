"""Paging, hyperparameter typing, downsampling, model definition packing, password hashing."""

from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass
from typing import Any

import pytest

from cairn.client.password import salt_and_hash
from services.master.domain.identity.auth import hash_password, verify_password
from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.kernel.paging import page_of
from services.master.domain.metrics.downsample import downsample
from services.master.domain.task_kinds.model_definition import ContextFile, list_files, pack
from services.master.domain.trials.hparams import HparamTyper, typed_hparams


@pytest.mark.parametrize(
    ("total", "offset", "limit", "start", "end"),
    [
        (250, 0, 0, 0, 100),  # limit 0 means 100
        (250, 200, 0, 200, 250),
        (250, 0, -1, 0, 250),  # -1 means all
        (250, -10, 5, 240, 245),  # negative offset counts from the end
        (3, 10, 5, 3, 3),
    ],
)
def test_paging(total: int, offset: int, limit: int, start: int, end: int) -> None:
    page = page_of(total, offset, limit)
    assert (page.start, page.end, page.total) == (start, end, total)


def test_hparams_come_back_typed_as_declared() -> None:
    definitions = {
        "layers": {"type": "int", "minval": 1, "maxval": 4},
        "lr": {"type": "log", "base": 10, "minval": -4, "maxval": -1},
        "act": {"type": "categorical", "vals": [1, "relu", True]},
        "batch": 32,
        "opt": {"momentum": {"type": "const", "val": 0.9}, "nesterov": True},
    }
    values = {
        "layers": 3.0,
        "lr": 0.001,
        "act": True,
        "batch": 32.0,
        "opt": {"momentum": 0.9, "nesterov": True},
    }
    typed = typed_hparams(values, definitions)
    assert typed == {
        "layers": 3,
        "lr": 0.001,
        "act": True,
        "batch": 32,
        "opt": {"momentum": 0.9, "nesterov": True},
    }
    assert type(typed["layers"]) is int and type(typed["batch"]) is int and typed["act"] is True
    assert (
        typed_hparams({"act": 1.0}, definitions)["act"] == 1
        and typed_hparams({"act": 1.0}, definitions)["act"] is not True
    )


def test_a_long_categorical_is_typed_by_one_lookup_as_a_scan_would() -> None:
    """The typer indexes a categorical's choices once for every trial of an experiment; what it
    answers is what a scan in order answers: the first equal choice, a bool only for a bool, a list
    or a mapping by equality, anything else as it came."""
    vals: list[object] = [*range(3000), "relu", True, 7.0, [1, 2], {"a": 1}, False]
    typer = HparamTyper({"c": {"type": "categorical", "vals": vals}})
    for value, expected in [
        (2999.0, 2999),
        (7.0, 7),  # the int 7 comes before the float 7.0
        (1.0, 1),
        (True, True),
        (0.0, 0),
        (False, False),
        ("relu", "relu"),
        ([1, 2], [1, 2]),
        ({"a": 1}, {"a": 1}),
        (3000.5, 3000.5),
        ([9], [9]),
    ]:
        typed = typer.typed({"c": value})["c"]
        assert typed == expected and type(typed) is type(expected), (value, typed)
    assert typer.typed({"c": 1.0})["c"] is not True and typer.typed({"c": True})["c"] is True


@dataclass
class Point:
    steps_completed: int
    metrics: dict[str, Any]


def test_downsample_keeps_ends_and_peaks() -> None:
    points = [Point(i, {"loss": 1.0}) for i in range(1000)]
    points[500] = Point(500, {"loss": 50.0})
    result = downsample(points, 50)
    assert len(result) == 50
    assert result[0] is points[0] and result[-1] is points[-1]
    assert points[500] in result
    assert [p.steps_completed for p in result] == sorted(p.steps_completed for p in result)
    assert downsample(points[:10], 50) == points[:10]


def test_pack_model_definition_and_limits() -> None:
    files = [
        ContextFile("src", 53, b"", 0, 0o755),
        ContextFile("src/train.py", 48, b"print('hi')\n", 0, 0o644),
        ContextFile("config.yaml", 48, b"name: x\n", 0, 0o644),
    ]
    archive = pack(files, limit_bytes=1024)
    assert sorted(list_files(archive)) == [("config.yaml", 8), ("src/train.py", 12)]
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        assert tar.extractfile("src/train.py").read() == b"print('hi')\n"  # type: ignore[union-attr]
    with pytest.raises(InvalidArgument, match=r"over the limit of .*\.detignore"):
        pack([ContextFile("big.bin", 48, b"x" * 2048, 0, 0o644)], limit_bytes=1024)
    for bad in ("/etc/passwd", "../escape.py", "a/../../b"):
        with pytest.raises(InvalidArgument, match=r"model_definition\[0\]\.path"):
            pack([ContextFile(bad, 48, b"", 0, 0o644)], limit_bytes=1024)


def test_passwords_are_stored_hashed_and_verify_both_forms() -> None:
    stored = hash_password(salt_and_hash("s3cret"))
    assert "s3cret" not in stored and salt_and_hash("s3cret") not in stored
    assert verify_password(salt_and_hash("s3cret"), stored)
    assert not verify_password(salt_and_hash("wrong"), stored)
    assert not verify_password(salt_and_hash("s3cret"), "garbage")

"""The JSON columns' decoder (store/db.py load_json_column): orjson where it can, and what orjson
refuses that Python's json module writes (NaN, Infinity, integers past 64 bits) decoded as before,
on both databases through the master's own engines."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import JSON, Column, Integer, MetaData, Table, select, text

from services.master.store.db import Database, load_json_column
from tests.support.databases import fresh_database

BIG = 123456789012345678901234567890


@pytest.mark.parametrize(
    "stored",
    [
        '{"lr": 0.01, "layers": [1, 2, 3], "name": "x", "none": null, "ok": true}',
        "[]",
        '"text"',
        '{"unicode": "\\u00e9\\ud83d\\ude00"}',
        '{"id": "12345678901234567890123", "n": 9223372036854775807}',
        json.dumps({"lone surrogate": "\ud800"}),  # json.dumps writes it; orjson refuses it
        '{"a": 1, "a": 2}',
        json.dumps({"big": BIG}),
    ],
)
def test_it_decodes_what_json_loads_decodes(stored: str) -> None:
    assert load_json_column(stored) == json.loads(stored)


def test_what_orjson_refuses_is_decoded_as_python_wrote_it() -> None:
    # json.dumps writes these by default (allow_nan); a summary of metrics may hold them.
    decoded = load_json_column(json.dumps({"loss": float("nan"), "max": float("inf"), "min": -math.inf}))
    assert math.isnan(decoded["loss"]) and decoded["max"] == math.inf and decoded["min"] == -math.inf
    assert load_json_column(json.dumps([BIG, -BIG])) == [BIG, -BIG]


def test_malformed_text_still_raises() -> None:
    with pytest.raises(ValueError):
        load_json_column('{"unterminated": ')


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    with fresh_database(request.param, tmp_path) as url:
        database = Database(url or f"sqlite:///{tmp_path / 'json.db'}")
        try:
            yield database
        finally:
            database.dispose()


def test_the_engines_decode_json_columns_with_it(database: Database) -> None:
    table = Table("json_probe", MetaData(), Column("id", Integer, primary_key=True), Column("doc", JSON))
    table.create(database.engine)
    # Text as another writer (or an older master) stored it, past what orjson takes.
    stored = json.dumps({"big": BIG, "lr": 0.5, "tags": ["a", "b"]})
    with database.transaction() as session:
        session.execute(text("INSERT INTO json_probe (id, doc) VALUES (1, :doc)"), {"doc": stored})
    with database.transaction() as session:
        assert session.execute(select(table.c.doc)).scalar_one() == json.loads(stored)
    with database.read() as session:
        assert session.execute(select(table.c.doc)).scalar_one() == json.loads(stored)

"""The schema itself: a valid draft-7 document that can be published as JSON."""

from __future__ import annotations

import json

from jsonschema import Draft7Validator

from services.master.domain.config import (
    ConfigDefaults,
    ExperimentConfigView,
    expand_config,
    parse_config_text,
)
from services.master.domain.config.schema import EXPERIMENT_SCHEMA


def test_schema_is_valid_draft_7() -> None:
    Draft7Validator.check_schema(EXPERIMENT_SCHEMA)


def test_schema_is_plain_json() -> None:
    assert json.loads(json.dumps(EXPERIMENT_SCHEMA)) == EXPERIMENT_SCHEMA


def test_custom_searcher_fields_are_free_form(defaults: ConfigDefaults) -> None:
    text = "entrypoint: x\nsearcher: {name: custom, metric: m, plugin: p, max_trials: lots, unit: batches}"
    view = ExperimentConfigView.from_expanded(expand_config(parse_config_text(text), defaults))
    assert view.max_trials is None
    assert view.searcher["unit"] == "batches"

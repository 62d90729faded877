"""parse_config_text: YAML text to a plain JSON mapping, or one error saying where the text is broken."""

from __future__ import annotations

import pytest

from services.master.domain.config import ConfigError, parse_config_text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "name: [a, b",
            "config: not valid YAML: line 1, column 12: expected ',' or ']', but got '<stream end>'"
            " (while parsing a flow sequence)",
        ),
        (
            "name: a\nsearcher: name: single",
            "config: not valid YAML: line 2, column 15: mapping values are not allowed here",
        ),
        (
            'name: "open',
            "config: not valid YAML: line 1, column 12: found unexpected end of stream"
            " (while scanning a quoted scalar)",
        ),
        (
            "name: a\nname: b",
            "config: not valid YAML: line 2, column 1: found duplicate key 'name'"
            " (while constructing a mapping)",
        ),
        (
            "a: 1\n---\nb: 2",
            "config: not valid YAML: line 2, column 1: but found another document"
            " (expected a single document in the stream)",
        ),
    ],
)
def test_text_that_is_not_yaml_gets_one_error_with_its_place(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config_text(text)
    assert caught.value.problems == [expected]


@pytest.mark.parametrize("text", ["", "# only a comment", "- a\n- b", "just a string", "42"])
def test_a_document_that_is_not_a_mapping_is_refused(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config_text(text)
    assert caught.value.problems == ["config: must be a mapping"]


def test_dates_stay_strings_and_keys_become_strings() -> None:
    parsed = parse_config_text("data:\n  day: 2024-05-01\n  1: one\n  true: yes\n  null: nothing\n  1.5: x")
    assert parsed == {"data": {"day": "2024-05-01", "1": "one", "true": True, "null": "nothing", "1.5": "x"}}


def test_anchors_and_merge_keys_work_as_in_determined_configs() -> None:
    text = """
base: &base {metric: loss, smaller_is_better: false}
searcher:
  <<: *base
  name: single
"""
    assert parse_config_text(text)["searcher"] == {
        "metric": "loss",
        "smaller_is_better": False,
        "name": "single",
    }


def test_unsafe_tags_are_refused() -> None:
    with pytest.raises(ConfigError, match="could not determine a constructor"):
        parse_config_text("name: !!python/object/apply:os.system ['true']")

"""The seeded generator reproduces numpy's legacy RandomState / Determined's nprand stream."""

from __future__ import annotations

import json

import pytest

from cairn.searcher_plugin.errors import InvalidSnapshot
from services.searcher.domain.rng import STATE_WORDS, MersenneTwister


def test_mt19937_reference_output() -> None:
    # The first output of MT19937 seeded with init_genrand(5489), from the reference implementation.
    assert MersenneTwister(5489).bits32() == 3499211612


@pytest.mark.parametrize(("seed", "expected"), [(0, 0.5488135039273248), (42, 0.3745401188473625)])
def test_unit_interval_matches_numpy_random_sample(seed: int, expected: float) -> None:
    # numpy.random.RandomState(seed).random_sample()
    assert MersenneTwister(seed).unit_interval() == expected


def test_intn_matches_numpy_randint() -> None:
    # numpy.random.RandomState(0).randint(0, 10, size=5): masked rejection on 32-bit draws.
    rng = MersenneTwister(0)
    assert [rng.intn(10) for _ in range(5)] == [5, 0, 3, 3, 7]


def test_intn_of_one_draws_nothing() -> None:
    a, b = MersenneTwister(3), MersenneTwister(3)
    assert a.intn(1) == 0
    assert a.bits32() == b.bits32()


def test_read_spends_words_low_byte_first() -> None:
    a, b = MersenneTwister(9), MersenneTwister(9)
    word = b.bits32()
    assert a.read(4) == word.to_bytes(4, "little")


def test_uniform_stays_in_range() -> None:
    rng = MersenneTwister(1)
    values = [rng.uniform(-2.0, 3.0) for _ in range(2000)]
    assert all(-2.0 <= v < 3.0 for v in values)


def test_state_round_trips_through_json_mid_stream() -> None:
    rng = MersenneTwister(1234)
    for _ in range(700):  # past a twist, so pos is mid-block
        rng.bits32()
    copy = MersenneTwister.from_state(json.loads(json.dumps(rng.to_state())))
    assert [copy.bits32() for _ in range(1000)] == [rng.bits32() for _ in range(1000)]


def test_bad_state_is_refused() -> None:
    with pytest.raises(InvalidSnapshot, match=r"rng.key"):
        MersenneTwister.from_state({"key": [1, 2], "pos": 0})
    with pytest.raises(InvalidSnapshot, match=r"rng.pos"):
        MersenneTwister.from_state({"key": [0] * STATE_WORDS, "pos": 625})

"""One seed and spec, one search: the same trials, request ids and trial seeds in the same order."""

from __future__ import annotations

import uuid

from cairn.searcher_plugin.events import ExitReason
from services.searcher.domain.rng import MersenneTwister
from tests.unit.searcher.searcher_builders import MasterDriver, grid_spec, random_spec

GRID = {
    "a": {"type": "int", "minval": 0, "maxval": 9, "count": 4},
    "b": {"type": "categorical", "vals": ["x", "y"]},
}


def run(spec_seed: int, grid: bool = False) -> MasterDriver:
    spec = grid_spec(GRID, concurrency=3, seed=spec_seed) if grid else random_spec(9, 3, seed=spec_seed)
    driver = MasterDriver.start(spec)
    # A fixed interleaving: the second-oldest trial exits for invalid hyperparameters now and then.
    for step in range(100):
        if not driver.running:
            break
        target = driver.running[min(1, len(driver.running) - 1)]
        driver.finish(target, ExitReason.INVALID_HP if step % 4 == 1 else None)
    return driver


def test_same_seed_same_trials() -> None:
    for grid in (False, True):
        first, second = run(1234, grid), run(1234, grid)
        assert first.created == second.created
        assert first.shutdown == second.shutdown


def test_another_seed_other_trials() -> None:
    a, b = run(1, False), run(2, False)
    assert [c.hparams for c in a.created] != [c.hparams for c in b.created]
    assert {c.request_id for c in a.created}.isdisjoint({c.request_id for c in b.created})
    # Grid points do not depend on the seed, but ids and trial seeds do.
    ga, gb = run(1, True), run(2, True)
    assert [c.hparams for c in ga.created] == [c.hparams for c in gb.created]
    assert [c.trial_seed for c in ga.created] != [c.trial_seed for c in gb.created]


def test_request_ids_are_unique_uuid4_and_trial_seeds_fit_31_bits() -> None:
    driver = run(99)
    ids = [c.request_id for c in driver.created]
    assert len(set(ids)) == len(ids)
    for rid in ids:
        assert uuid.UUID(rid).version == 4
    assert all(0 <= c.trial_seed < 2**31 for c in driver.created)


def test_draw_order_is_hyperparameters_then_request_id_then_trial_seed() -> None:
    # Determined's order (sampleAll, then NewRequestID, then the seed): changing it would change
    # every existing experiment's search.
    spec = random_spec(
        1,
        1,
        hparams={
            "n": {"type": "int", "minval": 0, "maxval": 9},
            "lr": {"type": "double", "minval": 0, "maxval": 1},
        },
        seed=0,
    )
    first = MasterDriver.start(spec).created[0]

    rng = MersenneTwister(0)
    lr = rng.unit_interval()  # "lr" sorts before "n"
    n = rng.intn(10)
    raw = bytearray(rng.read(16))
    raw[6] = (raw[6] & 0x0F) | 0x40
    raw[8] = (raw[8] & 0x3F) | 0x80
    seed = rng.bits32() & 0x7FFFFFFF
    assert first.hparams == {"lr": lr, "n": n}
    assert first.request_id == str(uuid.UUID(bytes=bytes(raw)))
    assert first.trial_seed == seed

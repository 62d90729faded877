"""The GC policy against worked examples, and against Determined's SQL run in SQLite."""

from __future__ import annotations

import math
import random
import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.checkpoint.domain.errors import InvalidArgument
from services.checkpoint.domain.gc_policy import GcCandidate, GcPolicy, decide_garbage, rank_candidates

# Trial 1: three validated checkpoints; trial 2: one validated, then a newer one without a metric.
EXAMPLE = [
    GcCandidate("c1", trial_id=1, steps_completed=100, searcher_metric=0.5),
    GcCandidate("c2", trial_id=1, steps_completed=200, searcher_metric=0.3),
    GcCandidate("c3", trial_id=1, steps_completed=300, searcher_metric=0.4),
    GcCandidate("c4", trial_id=2, steps_completed=100, searcher_metric=0.2),
    GcCandidate("c5", trial_id=2, steps_completed=200, searcher_metric=None),
]


def decide(
    candidates: list[GcCandidate],
    experiment_best: int,
    trial_best: int,
    trial_latest: int,
    smaller_is_better: bool = True,
    protected: tuple[str, ...] = (),
) -> tuple[set[str], set[str]]:
    decision = decide_garbage(
        candidates, GcPolicy(experiment_best, trial_best, trial_latest, smaller_is_better), protected
    )
    return set(decision.keep), set(decision.delete)


def test_ranks_of_the_example() -> None:
    ranks = rank_candidates(EXAMPLE, smaller_is_better=True)
    assert {uuid: (r.experiment_rank, r.trial_rank, r.latest_rank) for uuid, r in ranks.items()} == {
        "c1": (4, 3, 3),
        "c2": (2, 1, 2),
        "c3": (3, 2, 1),
        "c4": (1, 1, 2),
        "c5": (None, None, 1),
    }


def test_determined_defaults_keep_each_trials_best_and_latest() -> None:
    # save_experiment_best 0, save_trial_best 1, save_trial_latest 1.
    keep, delete = decide(EXAMPLE, 0, 1, 1)
    assert delete == {"c1"}
    assert keep == {"c2", "c3", "c4", "c5"}


def test_experiment_best_only() -> None:
    keep, delete = decide(EXAMPLE, 1, 0, 0)
    assert keep == {"c4"}
    assert delete == {"c1", "c2", "c3", "c5"}


def test_larger_is_better_flips_the_metric_ranks() -> None:
    keep, delete = decide(EXAMPLE, 0, 1, 0, smaller_is_better=False)
    assert keep == {"c1", "c4"}
    assert delete == {"c2", "c3", "c5"}


def test_checkpoints_without_a_metric_go_unless_latest() -> None:
    keep, delete = decide(EXAMPLE, 100, 100, 0)
    assert (keep, delete) == ({"c1", "c2", "c3", "c4"}, {"c5"})
    keep, delete = decide(EXAMPLE, 100, 100, 1)
    assert (keep, delete) == ({"c1", "c2", "c3", "c4", "c5"}, set())


def test_nan_counts_as_no_metric() -> None:
    candidates = [
        GcCandidate("nan", 1, 100, math.nan),
        GcCandidate("good", 1, 50, 1.0),
    ]
    keep, delete = decide(candidates, 5, 5, 0)
    assert (keep, delete) == ({"good"}, {"nan"})


def test_protected_checkpoints_are_kept() -> None:
    keep, delete = decide(EXAMPLE, 0, 0, 0, protected=("c1", "c5", "unknown"))
    assert keep == {"c1", "c5"}
    assert delete == {"c2", "c3", "c4"}


def test_equal_metrics_in_a_trial_prefer_the_earlier_step() -> None:
    candidates = [
        GcCandidate("later", 1, 200, 0.3),
        GcCandidate("earlier", 1, 100, 0.3),
    ]
    assert decide(candidates, 0, 1, 0) == ({"earlier"}, {"later"})


def test_equal_metrics_across_trials_prefer_the_lower_trial_id() -> None:
    candidates = [
        GcCandidate("trial-2", 2, 100, 0.1),
        GcCandidate("trial-1", 1, 100, 0.1),
    ]
    assert decide(candidates, 1, 0, 0) == ({"trial-1"}, {"trial-2"})


def test_equal_steps_share_the_latest_rank() -> None:
    candidates = [
        GcCandidate("p", 1, 300),
        GcCandidate("q", 1, 300),
        GcCandidate("r", 1, 200),
    ]
    assert decide(candidates, 0, 0, 1) == ({"p", "q"}, {"r"})


def test_the_order_of_candidates_does_not_matter() -> None:
    expected = decide(EXAMPLE, 0, 1, 1)
    shuffled = list(EXAMPLE)
    rng = random.Random(7)
    for _ in range(20):
        rng.shuffle(shuffled)
        assert decide(shuffled, 0, 1, 1) == expected


def test_results_keep_the_input_order() -> None:
    decision = decide_garbage(EXAMPLE, GcPolicy(0, 0, 0, True))
    assert decision.delete == ("c1", "c2", "c3", "c4", "c5")
    assert decide_garbage([], GcPolicy()).keep == ()


def test_bad_input_names_the_field() -> None:
    with pytest.raises(InvalidArgument, match=r"^policy\.save_trial_latest: must be >= 0, not -1$"):
        decide_garbage(EXAMPLE, GcPolicy(0, 1, -1, True))
    duplicate = [*EXAMPLE, GcCandidate("c2", 3, 1, 0.0)]
    with pytest.raises(
        InvalidArgument, match=r"^checkpoints\[5\]\.checkpoint_uuid: c2 is also checkpoints\[1\]$"
    ):
        decide_garbage(duplicate, GcPolicy())
    with pytest.raises(InvalidArgument, match=r"^checkpoints\[0\]\.checkpoint_uuid: required$"):
        decide_garbage([GcCandidate("", 1, 1)], GcPolicy())


def determined_sql(candidates: list[GcCandidate], policy: GcPolicy) -> set[str]:
    """Determined's GC query, with Cairn's documented tie-break in place of the validation id."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE c (uuid TEXT, trial_id INT, steps INT, metric REAL)")
    db.executemany(
        "INSERT INTO c VALUES (?, ?, ?, ?)",
        [(c.checkpoint_uuid, c.trial_id, c.steps_completed, c.searcher_metric) for c in candidates],
    )
    sign = 1 if policy.smaller_is_better else -1
    order = f"{sign} * metric ASC NULLS LAST, steps ASC, trial_id ASC, uuid ASC"
    rows = db.execute(
        f"""
        SELECT uuid FROM (
            SELECT uuid, metric,
                rank() OVER (ORDER BY {order}) AS experiment_rank,
                rank() OVER (PARTITION BY trial_id ORDER BY {order}) AS trial_rank,
                rank() OVER (PARTITION BY trial_id ORDER BY steps DESC) AS trial_order_rank
            FROM c
        )
        WHERE ((experiment_rank > ? AND trial_rank > ?) OR metric IS NULL) AND trial_order_rank > ?
        """,
        (policy.save_experiment_best, policy.save_trial_best, policy.save_trial_latest),
    ).fetchall()
    db.close()
    return {uuid for (uuid,) in rows}


candidate_lists = st.lists(
    st.tuples(
        st.integers(1, 3),
        st.integers(0, 4).map(lambda n: n * 100),
        st.sampled_from([None, 0.1, 0.2, 0.3, -1.0, math.nan]),
    ),
    max_size=12,
).map(
    lambda rows: [
        GcCandidate(f"u{index:02d}", trial, steps, metric)
        for index, (trial, steps, metric) in enumerate(rows)
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    candidates=candidate_lists,
    experiment_best=st.integers(0, 3),
    trial_best=st.integers(0, 3),
    trial_latest=st.integers(0, 3),
    smaller_is_better=st.booleans(),
)
def test_matches_determineds_query(
    candidates: list[GcCandidate],
    experiment_best: int,
    trial_best: int,
    trial_latest: int,
    smaller_is_better: bool,
) -> None:
    policy = GcPolicy(experiment_best, trial_best, trial_latest, smaller_is_better)
    decision = decide_garbage(candidates, policy)
    assert set(decision.delete) == determined_sql(candidates, policy)
    assert sorted(decision.keep + decision.delete) == sorted(c.checkpoint_uuid for c in candidates)

"""Which checkpoints an experiment's GC policy keeps: a pure function, no I/O.

Determined's rule (`ExperimentCheckpointsToGCRaw`): rank every checkpoint by its searcher metric,
better first, across the experiment (experiment rank) and within its trial (trial rank), and by
steps_completed, newest first, within its trial (latest rank). A checkpoint is deleted when

    ((experiment_rank > save_experiment_best AND trial_rank > save_trial_best) OR it has no metric)
    AND latest_rank > save_trial_latest

and it is not protected (a warm-start source, a registered model version, ...).

Ties, made deterministic:
- Metric ranks are distinct (1, 2, 3, ...) even for equal metrics, as Determined's tie-break on the
  validation id makes them. Equal metrics are ordered by steps_completed ascending (the earlier
  validation first, as a lower validation id would be), then trial_id, then checkpoint uuid.
- Latest ranks are SQL `rank()`s: checkpoints of a trial with equal steps_completed share a rank
  (1, 1, 3), so `save_trial_latest: 1` keeps all of the newest ones.
- A metric that is NaN counts as no metric: it cannot be ordered.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from services.checkpoint.domain.errors import InvalidArgument


@dataclass(frozen=True)
class GcCandidate:
    checkpoint_uuid: str
    trial_id: int
    steps_completed: int
    # The searcher metric of the validation at the checkpoint's step, when there is one.
    searcher_metric: float | None = None

    @property
    def has_metric(self) -> bool:
        return self.searcher_metric is not None and not math.isnan(self.searcher_metric)


@dataclass(frozen=True)
class GcPolicy:
    save_experiment_best: int = 0
    save_trial_best: int = 1
    save_trial_latest: int = 1
    smaller_is_better: bool = True


@dataclass(frozen=True)
class CandidateRanks:
    # None when the checkpoint has no metric.
    experiment_rank: int | None
    trial_rank: int | None
    latest_rank: int


@dataclass(frozen=True)
class GcDecision:
    """Both in the order the candidates came in."""

    keep: tuple[str, ...]
    delete: tuple[str, ...]


def _check(candidates: Sequence[GcCandidate], policy: GcPolicy) -> None:
    for name in ("save_experiment_best", "save_trial_best", "save_trial_latest"):
        value = getattr(policy, name)
        if value < 0:
            raise InvalidArgument(f"policy.{name}: must be >= 0, not {value}")
    first_index: dict[str, int] = {}
    for index, candidate in enumerate(candidates):
        if not candidate.checkpoint_uuid:
            raise InvalidArgument(f"checkpoints[{index}].checkpoint_uuid: required")
        if candidate.checkpoint_uuid in first_index:
            raise InvalidArgument(
                f"checkpoints[{index}].checkpoint_uuid: {candidate.checkpoint_uuid} is also "
                f"checkpoints[{first_index[candidate.checkpoint_uuid]}]"
            )
        first_index[candidate.checkpoint_uuid] = index


def rank_candidates(candidates: Sequence[GcCandidate], smaller_is_better: bool) -> dict[str, CandidateRanks]:
    """Each candidate's ranks (1 is best or newest), by checkpoint uuid."""

    def metric_order(candidate: GcCandidate) -> tuple[float, int, int, str]:
        metric = candidate.searcher_metric
        assert metric is not None
        signed = metric if smaller_is_better else -metric
        return (signed, candidate.steps_completed, candidate.trial_id, candidate.checkpoint_uuid)

    with_metric = sorted((c for c in candidates if c.has_metric), key=metric_order)
    experiment_rank = {c.checkpoint_uuid: rank for rank, c in enumerate(with_metric, start=1)}

    trial_rank: dict[str, int] = {}
    seen_in_trial: dict[int, int] = defaultdict(int)
    for candidate in with_metric:
        seen_in_trial[candidate.trial_id] += 1
        trial_rank[candidate.checkpoint_uuid] = seen_in_trial[candidate.trial_id]

    latest_rank: dict[str, int] = {}
    by_trial: dict[int, list[GcCandidate]] = defaultdict(list)
    for candidate in candidates:
        by_trial[candidate.trial_id].append(candidate)
    for trial_candidates in by_trial.values():
        newest_first = sorted(trial_candidates, key=lambda c: -c.steps_completed)
        for position, candidate in enumerate(newest_first, start=1):
            previous = newest_first[position - 2] if position > 1 else None
            if previous is not None and previous.steps_completed == candidate.steps_completed:
                latest_rank[candidate.checkpoint_uuid] = latest_rank[previous.checkpoint_uuid]
            else:
                latest_rank[candidate.checkpoint_uuid] = position

    return {
        c.checkpoint_uuid: CandidateRanks(
            experiment_rank=experiment_rank.get(c.checkpoint_uuid),
            trial_rank=trial_rank.get(c.checkpoint_uuid),
            latest_rank=latest_rank[c.checkpoint_uuid],
        )
        for c in candidates
    }


def decide_garbage(
    candidates: Sequence[GcCandidate], policy: GcPolicy, protected_uuids: Collection[str] = ()
) -> GcDecision:
    """Split the candidates into those the policy keeps and those it deletes.

    Raises InvalidArgument (naming the field) for a negative policy value or a duplicate uuid.
    """
    _check(candidates, policy)
    ranks = rank_candidates(candidates, policy.smaller_is_better)
    protected = set(protected_uuids)
    keep: list[str] = []
    delete: list[str] = []
    for candidate in candidates:
        rank = ranks[candidate.checkpoint_uuid]
        not_among_best = (
            rank.experiment_rank is None
            or rank.trial_rank is None
            or (
                rank.experiment_rank > policy.save_experiment_best
                and rank.trial_rank > policy.save_trial_best
            )
        )
        doomed = not_among_best and rank.latest_rank > policy.save_trial_latest
        if doomed and candidate.checkpoint_uuid not in protected:
            delete.append(candidate.checkpoint_uuid)
        else:
            keep.append(candidate.checkpoint_uuid)
    return GcDecision(keep=tuple(keep), delete=tuple(delete))

"""Log policies (Determined's `log_policies` in an experiment config): patterns matched against a
trial's log lines as they are stored, and what a match does when the trial next fails.

- `cancel_retries`: the failure is final (the trial ends ERROR, no restart), and its logs say
  "trial failed and matched logs to a don't retry policy", as Determined's do.
- `exclude_node`: the failure counts as usual, and the trial's later runs are not placed on the
  agent whose line matched ("... therefore will not schedule on <agent>"); with no other agent
  the trial waits, queued, as on Determined.

The policies' shape and checks are the config's (config/log_policies.py); creation refuses a bad
one, naming the field.
Matches are recorded on the trial in the lines' own transaction (metrics/logs.py), so a match is
never lost between the lines and their effect.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from services.master.domain.config.log_policies import (
    CANCEL_RETRIES,
    EXCLUDE_NODE,
    MAX_MATCHED_CHARS,
    LogPolicy,
    parse,
)
from services.master.domain.kernel.clock import utcnow
from services.master.store import models

# Determined's texts, which its clients and tests look for in a trial's logs.
NO_RETRY_TEXT = "trial failed and matched logs to a don't retry policy"
EXCLUDED_TEXT = "therefore will not schedule on"

# At most MAX_EXCLUDED agents are remembered per trial (a cluster larger than that has other
# agents to go to).
MAX_EXCLUDED = 256
# Experiments whose compiled policies are remembered at most (a cache emptied when full).
MAX_REMEMBERED = 10_000
# Experiment ids per read (well inside either database's bound on parameters).
IDS_PER_READ = 500


# An experiment's id and the version of its config.
ConfigVersion = tuple[int, int]


class ExperimentPolicies:
    """Each experiment's policies, compiled once per version of its config: a trial's lines are
    matched against its experiment's. (Continuing or editing an experiment replaces its config,
    its policies among it, and bumps the config's version: the trial's containers made since carry
    the new version.)"""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_version: dict[ConfigVersion, tuple[LogPolicy, ...]] = {}

    def of(self, s: Session, versions: Iterable[ConfigVersion]) -> dict[ConfigVersion, tuple[LogPolicy, ...]]:
        """The policies of each of `versions` (experiment id, config version); those not compiled
        yet are read in one statement (a batch of many agents' lines comes from many experiments).
        An experiment whose config has moved on since is read at its current version: the lines
        of a container made before are matched against the newer policies."""
        wanted = set(versions)
        with self._lock:
            found = {v: p for v in wanted if (p := self._by_version.get(v)) is not None}
        missing = sorted({experiment_id for experiment_id, _ in wanted - found.keys()})
        if not missing:
            return found
        read: dict[int, tuple[int, tuple[LogPolicy, ...]]] = {}
        for start in range(0, len(missing), IDS_PER_READ):
            rows = s.execute(
                select(
                    models.Experiment.id, models.Experiment.config_version, models.Experiment.config
                ).where(models.Experiment.id.in_(missing[start : start + IDS_PER_READ]))
            )
            read.update({row[0]: (row[1] or 0, parse((row[2] or {}).get("log_policies"))) for row in rows})
        for experiment_id, version in wanted - found.keys():
            if experiment_id in read:
                found[(experiment_id, version)] = read[experiment_id][1]
        with self._lock:
            if len(self._by_version) > MAX_REMEMBERED:
                self._by_version.clear()
            # Under the version asked for as well: a container made before an edit of its
            # experiment's config asks for that version again with each of its batches.
            self._by_version.update({(e, version): policies for e, (version, policies) in read.items()})
            self._by_version.update(found)
        return found


@dataclass(frozen=True)
class Line:
    trial_id: int
    config: ConfigVersion
    agent_id: str
    message: str


def record_matches(s: Session, known: ExperimentPolicies, lines: Sequence[Line]) -> None:
    """Match a batch's trial lines against their trials' policies; record what matched on the
    trials, in the lines' transaction `s`."""
    policies_of = known.of(s, {line.config for line in lines})
    no_retry: set[int] = set()
    excluded: dict[int, set[str]] = {}
    for line in lines:
        policies = policies_of.get(line.config)
        if not policies:
            continue
        text = line.message[:MAX_MATCHED_CHARS]
        for policy in policies:
            if policy.pattern.search(text) is None:
                continue
            if CANCEL_RETRIES in policy.actions:
                no_retry.add(line.trial_id)
            if EXCLUDE_NODE in policy.actions and line.agent_id:
                excluded.setdefault(line.trial_id, set()).add(line.agent_id)
    for trial_id in no_retry | set(excluded):
        trial = s.get(models.Trial, trial_id)
        if trial is None:
            continue
        if trial_id in no_retry:
            trial.log_policy_no_retry = True
        added = excluded.get(trial_id, set()) - set(trial.excluded_agents or [])
        if added:
            trial.excluded_agents = sorted({*(trial.excluded_agents or []), *added})[:MAX_EXCLUDED]


def write_line(s: Session, alloc: models.Allocation, message: str) -> None:
    """A line of the master's in the trial's logs (Determined writes these too), after its own."""
    container_id = f"master:{alloc.id}"
    seq = (
        s.scalar(select(func.max(models.TaskLog.seq)).where(models.TaskLog.container_id == container_id)) or 0
    ) + 1
    s.add(
        models.TaskLog(
            task_id=alloc.task_id,
            trial_id=alloc.trial_id,
            allocation_id=alloc.id,
            container_id=container_id,
            seq=seq,
            agent_id="",
            stdtype="stdout",
            level="ERROR",
            source="master",
            timestamp=utcnow(),
            message=message,
        )
    )


def excluded_note(trial: models.Trial, agents: Sequence[str]) -> str:
    listed = ", ".join(agents)
    return (
        f"trial {trial.id} failed and its logs matched an exclude_node log policy on agent(s) "
        f"{listed}: {EXCLUDED_TEXT} {listed}"
    )

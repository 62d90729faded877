"""Connects the lifecycles at start-up: an allocation's end reaches its trial (or, for any other
kind of task, the task's lifecycle), a trial's end its experiment. Commands go down (experiments ->
trials -> allocations, each importing the next); the endings come back up through the context's
hooks, so no lifecycle module imports its owner."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from services.master.domain.allocations import containers
from services.master.domain.allocations.allocations import Outcome
from services.master.domain.experiments import experiments
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.tasks import tasks
from services.master.domain.trials import trials
from services.master.store import models


def preload_agent_reports(w: Work, keys: Sequence[Hashable]) -> None:
    """Before a batch of agents' reports (containers.ReportKey) is applied in one unit of work:
    their containers and allocations, and what the trials of the allocations they may end read,
    in two statements for the batch (kernel/batched_units.py)."""
    ending = containers.preload(w, keys)
    trials.preload_exits(w, {alloc.trial_id for alloc in ending if alloc.trial_id is not None})


def connect(ctx: MasterContext) -> None:
    def allocation_ended(w: Work, alloc: models.Allocation, outcome: str) -> None:
        if alloc.trial_id is not None:
            trials.on_allocation_exit(ctx, w, alloc, Outcome(outcome))
        else:
            tasks.on_allocation_exit(ctx, w, alloc, Outcome(outcome))

    def trial_ended(w: Work, trial: models.Trial) -> None:
        experiments.on_trial_end(ctx, w, trial)

    ctx.allocation_exit_hooks.append(allocation_ended)
    ctx.trial_end_hooks.append(trial_ended)

"""The loop that does the work the master owes (deferred_work.py): claim a due item, run its
kind's handler, then mark it done or due again, with capped exponential backoff and jitter after a
failure. Handlers are idempotent (a run cut short by a crash runs again whole), take the item's
subject id, and return False for "not yet" (waiting on other work, not a failure)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping

from services.common.logging import get_logger
from services.master.domain.checkpoints.checkpoints import CheckpointGc
from services.master.domain.deletion import deletion, workspace_deletion
from services.master.domain.experiments import experiments
from services.master.domain.kernel import deferred_work
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.deferred_work import Backoff, Claimed
from services.master.domain.kernel.loops import BackgroundLoop

log = get_logger(__name__)

Handler = Callable[[int], bool]

# How often an idle loop looks for due work (one indexed read), and how soon "not yet" looks again.
PERIOD_S = 1.0
NOT_YET_S = 1.0
# Items one step runs before it yields to the stop check and the rest of the loop.
ITEMS_PER_STEP = 20
DEFAULT_BACKOFF = Backoff()


def master_handlers(ctx: MasterContext, gc: CheckpointGc) -> dict[str, Handler]:
    def collect(experiment_id: int) -> bool:
        gc.collect(experiment_id)
        return True

    def delete_experiment(experiment_id: int) -> bool:
        deletion.delete_now(ctx, experiment_id)
        return True

    return {
        deferred_work.CHECKPOINT_GC: collect,
        deferred_work.DELETE_EXPERIMENT: delete_experiment,
        deferred_work.FINISH_PROJECT_DELETION: lambda i: workspace_deletion.finish_project(ctx, i),
        deferred_work.FINISH_WORKSPACE_DELETION: lambda i: workspace_deletion.finish_workspace(ctx, i),
        deferred_work.STOP_TRIALS: lambda i: experiments.stop_remaining(ctx, i),
    }


class DeferredWorkRunner:
    """Runs due items one at a time (storage and the checkpoint service see one GC or deletion at a
    time from this master). `run_due` is the loop's step; tests call it directly."""

    def __init__(
        self, ctx: MasterContext, handlers: Mapping[str, Handler], backoff: Backoff = DEFAULT_BACKOFF
    ) -> None:
        self._ctx = ctx
        self._handlers = dict(handlers)
        self._backoff = backoff

    def run_due(self, limit: int = ITEMS_PER_STEP) -> int:
        """Run up to `limit` due items; how many were run."""
        ran = 0
        holder = self._ctx.master_id
        while ran < limit and not self._ctx.stopping.is_set() and deferred_work.next_due(self._ctx):
            item = deferred_work.claim_next(self._ctx, holder)
            if item is None:
                break  # another master took what was due
            self._run(item, holder)
            ran += 1
        return ran

    def _run(self, item: Claimed, holder: str) -> None:
        ctx = self._ctx
        context = {"kind": item.kind, "subject_id": item.subject_id, "attempt": item.attempts + 1}
        handler = self._handlers.get(item.kind)
        try:
            if handler is None:
                raise RuntimeError(f"this master has no handler for {item.kind!r}")
            with self._lease_renewed(item, holder):
                done = handler(item.subject_id)
        except Exception as exc:
            delay = self._backoff.delay(item.attempts + 1)
            log.warning(
                "deferred work failed; will retry", retry_in_s=round(delay, 1), error=str(exc), **context
            )
            deferred_work.retry(ctx, item, holder, delay, f"{type(exc).__name__}: {exc}")
            return
        if done:
            deferred_work.complete(ctx, item, holder)
            log.info("deferred work done", **context)
        else:
            deferred_work.retry(ctx, item, holder, NOT_YET_S, None)

    @contextlib.contextmanager
    def _lease_renewed(self, item: Claimed, holder: str) -> Iterator[None]:
        """Keep the claim while the handler runs, however long storage takes."""
        finished = threading.Event()

        def renew() -> None:
            while not finished.wait(deferred_work.LEASE_S / 3):
                try:
                    deferred_work.renew(self._ctx, item, holder)
                except Exception as exc:  # the lease may lapse; the work is idempotent
                    log.warning("could not renew a deferred work claim", kind=item.kind, error=str(exc))

        renewer = threading.Thread(target=renew, name=f"lease-{item.kind}-{item.subject_id}", daemon=True)
        renewer.start()
        try:
            yield
        finally:
            finished.set()
            renewer.join()


def start(ctx: MasterContext, gc: CheckpointGc) -> BackgroundLoop:
    """The master's deferred-work loop, running from start-up to stop (registered in app.py)."""
    runner = DeferredWorkRunner(ctx, master_handlers(ctx, gc))

    def step() -> None:
        runner.run_due()

    loop = BackgroundLoop(ctx, "deferred-work", step, period_s=PERIOD_S)
    loop.start()
    return loop

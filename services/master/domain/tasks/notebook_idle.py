"""A notebook's idle_timeout, as Determined's: the notebook's launcher reports every few seconds
whether JupyterLab is idle (by the config's notebook_idle_type); once a notebook has been idle
for its idle_timeout without a break, the master kills it.

The master, not the task, keeps the time (IdleClock), so a task cannot stretch or shorten its
own timeout; only the notebook's own allocation may report for it.
"""

from __future__ import annotations

from services.common.logging import get_logger
from services.common.principal import Principal
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.errors import PermissionDenied
from services.master.domain.kernel.states import TaskKind
from services.master.domain.task_kinds.notebook import idle_timeout_s
from services.master.domain.tasks import tasks

log = get_logger(__name__)


def report_idle(ctx: MasterContext, principal: Principal, notebook_id: str, idle: bool) -> None:
    """One report from the notebook's launcher; kills the notebook once its idle time is up."""
    with ctx.unit_of_work() as w:
        task = tasks.load(w, notebook_id, TaskKind.NOTEBOOK)
        alloc = tasks.live_allocation(w, task)
        if not principal.internal and (alloc is None or principal.allocation_id != alloc.id):
            raise PermissionDenied(
                f"notebook_id: only notebook {notebook_id}'s own allocation reports its idleness"
            )
        timeout = idle_timeout_s(task.config or {})
        idle_for = ctx.idle_clock.report(notebook_id, idle)
        if timeout is None or idle_for < timeout:
            return
        log.info("notebook idle timeout", task_id=notebook_id, idle_s=round(idle_for), timeout_s=timeout)
        tasks.kill(ctx, w, task)
    ctx.idle_clock.forget(notebook_id)

"""The provisioning loop: every pool with a provider gets a step each period (Determined's
provisioner ticks every 5 s). One thread for all pools: a step is a few queries and, at most, a
few provider calls; a provider that fails waits out its own backoff without holding up the rest."""

from __future__ import annotations

import time

from services.common.logging import get_logger
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.loops import BackgroundLoop
from services.master.domain.provisioning.provisioner import PoolProvisioner

log = get_logger(__name__)


def start(ctx: MasterContext, provisioners: list[PoolProvisioner], period_s: float) -> BackgroundLoop | None:
    """The loop over `provisioners`, started; None when no pool has a provider."""
    if not provisioners:
        return None

    def step() -> None:
        for provisioner in provisioners:
            try:
                provisioner.step(time.time())
            except Exception:  # one pool's failure must not stop the others' provisioning
                log.exception("provisioning step failed", pool=provisioner.pool)

    loop = BackgroundLoop(ctx, "provisioner", step, period_s=period_s)
    loop.start()
    log.info("provisioning", pools=[p.pool for p in provisioners], period_s=period_s)
    return loop

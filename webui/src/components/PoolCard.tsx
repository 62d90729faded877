// One resource pool as its teams share it: the scheduler type, a lock with the number of
// workspaces when the pool is bound (as Determined's cluster view shows it), the bound workspaces
// (an admin manages them here), and for a fair-share pool how its slots are divided.

import { getPoolBindings, getPoolShares } from "../api/endpoints";
import type { ResourcePool, Workspace } from "../api/types";
import { printable, schedulerLabel } from "../format";
import { usePoll } from "../hooks";
import { ErrorNote } from "./ErrorNote";
import { FairShareTable } from "./FairShareTable";
import { PoolBindings } from "./PoolBindings";

const FAIR_SHARE = "SCHEDULER_TYPE_FAIR_SHARE";

/** Drawn inline: the page fetches no icon font, and a system emoji font may be missing. */
function LockIcon() {
  return (
    <svg class="lock-icon" viewBox="0 0 16 16" width="14" height="14" aria-hidden="true" focusable="false">
      <rect x="3" y="7" width="10" height="8" rx="1.5" fill="currentColor" />
      <path d="M5 7V5a3 3 0 0 1 6 0v2" fill="none" stroke="currentColor" stroke-width="1.6" />
    </svg>
  );
}

export function PoolCard(props: { pool: ResourcePool; workspaces: Workspace[]; admin: boolean }) {
  const { pool } = props;
  const fair = pool.schedulerType === FAIR_SHARE;
  const bindings = usePoll((signal) => getPoolBindings(pool.name, signal), 10000, [pool.name]);
  // Shares change with every scheduling pass: read as often as the slots.
  const shares = usePoll(
    (signal) => (fair ? getPoolShares(pool.name, signal) : Promise.resolve(undefined)),
    fair ? 3000 : 0,
    [pool.name, fair],
  );
  const bound = bindings.data?.workspaceIds ?? [];
  const name = printable(pool.name);
  return (
    <section class="pool-card" data-pool-card={pool.name} aria-label={`Resource pool ${name}`}>
      <header class="pool-card-head">
        <h3>{name}</h3>
        <span class="badge badge-scheduler" data-field="scheduler">
          {schedulerLabel(pool.schedulerType)}
        </span>
        {bound.length > 0 ? (
          <span
            class="pool-lock"
            data-field="bound-count"
            title={`Bound to ${bound.length} workspace${bound.length === 1 ? "" : "s"}`}
            aria-label={`Bound to ${bound.length} workspace${bound.length === 1 ? "" : "s"}`}
          >
            <LockIcon /> {bound.length}
          </span>
        ) : null}
        <span class="muted">
          {pool.slotsUsed} / {pool.slotsAvailable} slots in use · {pool.stats?.queuedCount ?? 0} queued
        </span>
      </header>
      <ErrorNote error={bindings.error} what="the pool's bindings" />
      <PoolBindings
        pool={pool.name}
        bound={bound}
        workspaces={props.workspaces}
        admin={props.admin}
        bindable={!pool.defaultComputePool && !pool.defaultAuxPool}
        onChanged={bindings.refresh}
      />
      <ErrorNote error={shares.error} what="the pool's shares" />
      {fair && shares.data ? <FairShareTable pool={pool.name} shares={shares.data} /> : null}
    </section>
  );
}

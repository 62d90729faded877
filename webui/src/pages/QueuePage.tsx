// The job queue of every resource pool, in the order the scheduler serves it: which job comes
// next, why each waits (a quota, its fair share, no free slot), and when it is forecast to start.

import { getResourcePools } from "../api/endpoints";
import { ErrorNote } from "../components/ErrorNote";
import { JobQueueTable } from "../components/JobQueueTable";
import { printable, schedulerLabel } from "../format";
import { usePoll } from "../hooks";

export function QueuePage() {
  const pools = usePoll((signal) => getResourcePools(signal), 10000, []);
  const list = pools.data?.resourcePools ?? [];
  return (
    <section aria-labelledby="queue-title">
      <div class="page-head">
        <h1 id="queue-title">Queue</h1>
        <span class="muted">jobs waiting or running in each resource pool, first served first</span>
      </div>
      <ErrorNote error={pools.error} what="resource pools" />
      {list.map((p) => (
        <section key={p.name} class="queue-pool" aria-label={`Queue of pool ${printable(p.name)}`}>
          <h2>
            {printable(p.name)}{" "}
            <span class="muted">
              {schedulerLabel(p.schedulerType)} · {p.slotsUsed} / {p.slotsAvailable} slots in use
            </span>
          </h2>
          <JobQueueTable pool={p.name} />
        </section>
      ))}
    </section>
  );
}

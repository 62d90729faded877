// One pool's queue in the scheduler's order: position, the job and its kind, owner, slots held
// and wanted, state, why it waits, when it is forecast to start and what it waits for. The
// forecast fields are filled by the master when it has one; without them the cells stay empty.

import { getPoolQueue } from "../api/endpoints";
import type { Job } from "../api/types";
import { printable } from "../format";
import { usePoll } from "../hooks";
import { ErrorNote } from "./ErrorNote";
import { Link } from "./Link";
import { PredictedStart } from "./PredictedStart";

const POLL_MS = 3000;

/** "TYPE_EXPERIMENT" → "experiment". */
function jobType(type: string): string {
  return type.replace(/^TYPE_/, "").toLowerCase().replace(/_/g, " ");
}

function JobName(props: { job: Job }) {
  const { job } = props;
  const name = printable(job.name) || printable(job.jobId);
  if (job.type === "TYPE_EXPERIMENT" && /^\d+$/.test(job.entityId)) {
    return <Link href={`/experiments/${job.entityId}`}>{name}</Link>;
  }
  return <>{name}</>;
}

function jobState(job: Job): { label: string; kind: string } {
  const state = job.summary?.state ?? "";
  if (state === "STATE_SCHEDULED" || state === "STATE_SCHEDULED_BACKFILLED") {
    // Partly placed (some of its slots wait): shown apart from a job that runs whole.
    if (job.allocatedSlots < job.requestedSlots) return { label: "Partly scheduled", kind: "paused" };
    return { label: state === "STATE_SCHEDULED" ? "Scheduled" : "Backfilled", kind: "running" };
  }
  return { label: "Queued", kind: "queued" };
}

export function JobQueueTable(props: { pool: string }) {
  const { pool } = props;
  const { data, error } = usePoll((signal) => getPoolQueue(pool, signal), POLL_MS, [pool]);
  const jobs = (data?.jobs ?? []).map((j) => j.full).filter((j): j is Job => Boolean(j));
  return (
    <>
      <ErrorNote error={error} what={`the queue of pool ${printable(pool)}`} />
      <div class="table-wrap">
        <table class="table" data-table="queue" data-queue-pool={pool}>
          <caption class="visually-hidden">Jobs of pool {printable(pool)} in queue order</caption>
          <thead>
            <tr>
              <th scope="col">#</th>
              <th scope="col">Job</th>
              <th scope="col">Owner</th>
              <th scope="col">Slots</th>
              <th scope="col">State</th>
              <th scope="col">Waiting reason</th>
              <th scope="col">Predicted start</th>
              <th scope="col">Waits for</th>
            </tr>
          </thead>
          <tbody>
            {jobs.map((job, index) => {
              const state = jobState(job);
              return (
                <tr key={job.jobId} data-job-id={job.jobId}>
                  <td class="num" data-field="position">
                    {(job.summary?.jobsAhead ?? index) + 1}
                  </td>
                  <td>
                    <JobName job={job} /> <span class="muted">{jobType(job.type)}</span>
                  </td>
                  <td>{printable(job.username)}</td>
                  <td class="num" data-field="slots" title="allocated / requested">
                    {job.allocatedSlots} / {job.requestedSlots}
                  </td>
                  <td>
                    <span class={`badge badge-${state.kind}`}>{state.label}</span>
                  </td>
                  <td data-field="waiting-reason">{printable(job.waitingReason) || <span class="muted">–</span>}</td>
                  <td>
                    <PredictedStart at={job.predictedStart} madeAt={job.forecastTime} />
                  </td>
                  <td data-field="predicted-after">{printable(job.predictedAfter) || <span class="muted">–</span>}</td>
                </tr>
              );
            })}
          </tbody>
        </table>
        {data && jobs.length === 0 ? <p class="empty">No job in this pool's queue.</p> : null}
      </div>
    </>
  );
}

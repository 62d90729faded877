// The dynamic agents of one resource pool: the provider and its limits, the provider's failure while
// it persists, the instances the master launched and where each is in its life, and the
// provisioner's last decisions with their reasons (what `cairn resource-pool describe` shows).

import type { ProvisionedInstance, ProvisionerStatus, ResourcePool } from "../api/types";
import { formatDuration, formatTime, num, printable } from "../format";

/** What an instance's phase means to the reader, and the badge colour family it takes. */
function instancePhase(instance: ProvisionedInstance): { label: string; kind: string } {
  // A connected agent that runs nothing is the one the provisioner will retire once idle long
  // enough: shown apart from a busy one, though both are RUNNING to the provisioner.
  if (instance.phase === "RUNNING" && instance.idleSince) return { label: "Idle", kind: "paused" };
  const label = instance.phase.charAt(0) + instance.phase.slice(1).toLowerCase();
  if (instance.phase === "RUNNING") return { label, kind: "running" };
  if (instance.phase === "LAUNCHING" || instance.phase === "STARTING") return { label, kind: "queued" };
  if (instance.phase === "DRAINING" || instance.phase === "TERMINATING") return { label, kind: "stopping" };
  return { label: printable(label), kind: "unknown" };
}

/** The colour family of a decision's action (the phases it moves instances to, launch, error). */
function actionKind(action: string): string {
  if (action === "error") return "error";
  if (action === "launch" || action === "adopt" || action === "starting") return "queued";
  if (action === "running" || action === "undrain") return "running";
  if (action === "draining" || action === "terminating") return "stopping";
  if (action === "gone") return "canceled";
  return "unknown";
}

function seconds(value: ProvisionerStatus["maxIdleAgentPeriodS"]): string {
  const s = num(value);
  return s === null ? "–" : formatDuration(s * 1000);
}

export function ProvisionerPanel(props: { pool: ResourcePool; status: ProvisionerStatus }) {
  const { pool, status } = props;
  const name = printable(pool.name);
  const instances = status.instances ?? [];
  const events = status.recentEvents ?? [];
  const slotsEach = status.instanceSlots === 1 ? "1 slot" : `${status.instanceSlots} slots`;
  return (
    <section class="provisioner" data-provisioned-pool={pool.name} aria-label={`Dynamic agents of pool ${name}`}>
      <h3>
        Pool {name} · provider <span data-field="provider">{printable(status.provider)}</span>
      </h3>
      <p class="muted" data-field="limits">
        {status.minInstances}–{status.maxInstances} instances of {slotsEach} each · retired after{" "}
        {seconds(status.maxIdleAgentPeriodS)} idle · replaced when not connected within{" "}
        {seconds(status.maxAgentStartingPeriodS)}
      </p>
      {status.lastError ? (
        <p class="error-note" role="alert" data-field="provider-error">
          Provider error: {printable(status.lastError)}
        </p>
      ) : null}
      <div class="table-wrap">
        <table class="table" data-table="instances">
          <caption class="visually-hidden">Instances of pool {name}</caption>
          <thead>
            <tr>
              <th scope="col">Instance</th>
              <th scope="col">Phase</th>
              <th scope="col">Launched</th>
              <th scope="col">Connected</th>
              <th scope="col">Drain reason</th>
              <th scope="col">Why launched</th>
            </tr>
          </thead>
          <tbody>
            {instances.map((i) => {
              const phase = instancePhase(i);
              return (
                <tr key={i.id} data-instance-id={i.id}>
                  <td>{printable(i.id)}</td>
                  <td>
                    <span class={`badge badge-${phase.kind}`} data-phase={i.phase}>
                      {phase.label}
                    </span>
                    {i.idleSince && i.phase === "RUNNING" ? (
                      <span class="muted"> since {formatTime(i.idleSince)}</span>
                    ) : null}
                  </td>
                  <td>{formatTime(i.launchedAt)}</td>
                  <td>{formatTime(i.connectedAt)}</td>
                  <td>{printable(i.drainReason) || "–"}</td>
                  <td>{printable(i.reason) || "–"}</td>
                </tr>
              );
            })}
          </tbody>
        </table>
        {instances.length === 0 ? <p class="empty">No instance at the moment.</p> : null}
      </div>
      <h3 class="provisioner-events-title">Recent decisions</h3>
      <div class="table-wrap">
        <table class="table" data-table="decisions">
          <caption class="visually-hidden">Recent decisions of pool {name}, newest first</caption>
          <thead>
            <tr>
              <th scope="col">Time</th>
              <th scope="col">Action</th>
              <th scope="col">Instance</th>
              <th scope="col">Reason</th>
            </tr>
          </thead>
          <tbody>
            {events.map((e, index) => (
              <tr key={`${e.at ?? ""}-${index}`} data-action={e.action}>
                <td>{formatTime(e.at)}</td>
                <td>
                  <span class={`badge badge-${actionKind(e.action)}`}>{printable(e.action)}</span>
                </td>
                <td>{printable(e.instanceId) || "–"}</td>
                <td>{printable(e.message)}</td>
              </tr>
            ))}
          </tbody>
        </table>
        {events.length === 0 ? <p class="empty">No decision yet.</p> : null}
      </div>
    </section>
  );
}

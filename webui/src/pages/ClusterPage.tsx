// The cluster: agents, a map of every slot and what runs on it, the resource pools and how teams
// share each (scheduler, bound workspaces, fair-share division), and for a pool whose agents the
// master provisions, its instances and the provisioner's decisions.

import { useEffect, useState } from "preact/hooks";
import { getAgents, getResourcePools, getWorkspaces } from "../api/endpoints";
import { DataTable } from "../components/DataTable";
import { ErrorNote } from "../components/ErrorNote";
import { PoolCard } from "../components/PoolCard";
import { ProvisionerPanel } from "../components/ProvisionerPanel";
import { SlotMap } from "../components/SlotMap";
import { formatTime, printable } from "../format";
import { usePoll } from "../hooks";

export function ClusterPage(props: { admin: boolean }) {
  const agentsPoll = usePoll((signal) => getAgents(signal), 3000, []);
  // Provisioned instances change phase within seconds (launched, connected, idle, retired): their
  // pools are read as often as the agents; static pools change rarely.
  const [provisioned, setProvisioned] = useState(false);
  const poolsPoll = usePoll((signal) => getResourcePools(signal), provisioned ? 3000 : 10000, []);
  // Names for the pools' bound workspaces and the admin's binding editor.
  const workspacesPoll = usePoll((signal) => getWorkspaces(signal), 30000, []);
  const agents = agentsPoll.data?.agents ?? [];
  const pools = poolsPoll.data?.resourcePools ?? [];
  const dynamicPools = pools.filter((p) => p.provisioner);
  const hasDynamic = dynamicPools.length > 0;
  useEffect(() => setProvisioned(hasDynamic), [hasDynamic]);
  const slots = agents.flatMap((a) => Object.values(a.slots ?? {}));
  const busy = slots.filter((s) => s.container && s.container.state !== "STATE_TERMINATED").length;

  return (
    <section aria-labelledby="cluster-title">
      <div class="page-head">
        <h1 id="cluster-title">Cluster</h1>
        <span class="muted">
          {agents.filter((a) => a.connected).length} of {agents.length} agents connected · {busy} of {slots.length} slots
          in use
        </span>
      </div>
      <ErrorNote error={agentsPoll.error} what="agents" />
      <h2>Slots</h2>
      {agentsPoll.data && agents.length === 0 ? <p class="empty">No agent has registered yet.</p> : null}
      <SlotMap agents={agents} />
      <h2>Agents</h2>
      <DataTable
        columns={["ID", "Connected", "Scheduling", "Resource pool", "Slots", "Addresses", "Last heartbeat"]}
        caption="Agents"
      >
        {agents.map((a) => (
          <tr key={a.id} data-agent-id={a.id}>
            <td>
              {a.id}
              {a.hostname && a.hostname !== a.id ? <span class="muted"> ({a.hostname})</span> : null}
            </td>
            <td>
              <span class={`badge badge-${a.connected ? "completed" : "error"}`}>{a.connected ? "Connected" : "Disconnected"}</span>
            </td>
            <td>{a.enabled ? (a.draining ? "Draining" : "Enabled") : "Disabled"}</td>
            <td>{(a.resourcePools ?? []).join(", ")}</td>
            <td class="num">{Object.keys(a.slots ?? {}).length}</td>
            <td>{(a.addresses ?? []).join(", ") || "–"}</td>
            <td>{formatTime(a.lastHeartbeat)}</td>
          </tr>
        ))}
      </DataTable>
      <h2>Resource pools</h2>
      <ErrorNote error={poolsPoll.error} what="resource pools" />
      <DataTable
        columns={["Name", "Type", "Agents", "Slots used", "Slot type", "Scheduler", "Queued", "Default"]}
        caption="Resource pools"
      >
        {pools.map((p) => (
          <tr key={p.name} data-pool={p.name}>
            <td>
              {printable(p.name)}
              {p.description ? <span class="muted"> — {printable(p.description)}</span> : null}
            </td>
            <td>
              {p.type.replace(/^(RESOURCE_POOL_)?TYPE_/, "").toLowerCase()}
              {p.provisioner ? <span class="muted"> · provider {printable(p.provisioner.provider)}</span> : null}
            </td>
            <td class="num">{p.numAgents}</td>
            <td class="num">
              {p.slotsUsed} / {p.slotsAvailable}
            </td>
            <td>{p.slotType.replace(/^TYPE_/, "")}</td>
            <td>
              {p.schedulerType.replace(/^SCHEDULER_TYPE_/, "").toLowerCase().replace("_", " ")}
              {p.preemptionEnabled ? <span class="muted"> · preemptive</span> : null}
            </td>
            <td class="num">{p.stats?.queuedCount ?? 0}</td>
            <td>{[p.defaultComputePool ? "compute" : "", p.defaultAuxPool ? "aux" : ""].filter(Boolean).join(", ") || "–"}</td>
          </tr>
        ))}
      </DataTable>
      <h2>Sharing</h2>
      <ErrorNote error={workspacesPoll.error} what="workspaces" />
      <div class="pool-cards">
        {pools.map((p) => (
          <PoolCard key={p.name} pool={p} workspaces={workspacesPoll.data?.workspaces ?? []} admin={props.admin} />
        ))}
      </div>
      {hasDynamic ? <h2>Dynamic agents</h2> : null}
      {dynamicPools.map((p) => (p.provisioner ? <ProvisionerPanel key={p.name} pool={p} status={p.provisioner} /> : null))}
    </section>
  );
}

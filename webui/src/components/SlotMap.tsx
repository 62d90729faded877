// Each agent's slots as boxes, coloured by what occupies them and labelled with the allocation
// ("<experiment>.<trial>.<run>") running there, linked to its trial. An allocation that spans
// several agents (a multi-slot trial) shows on each which of its containers runs there.

import type { Agent, Slot } from "../api/types";
import { parseAllocationId } from "../format";
import { Link } from "./Link";

function slotState(slot: Slot, agent: Agent): { kind: string; label: string } {
  if (!agent.connected) return { kind: "offline", label: "Agent offline" };
  const container = slot.container;
  if (container && container.state !== "STATE_TERMINATED") {
    const state = container.state.replace(/^STATE_/, "").toLowerCase();
    return { kind: state, label: state.charAt(0).toUpperCase() + state.slice(1) };
  }
  // Out of service since its device failed (a GPU's critical Xid or ECC error), until an admin enables it.
  if (slot.unhealthy) return { kind: "unhealthy", label: "Unhealthy" };
  if (!slot.enabled || !agent.enabled) return { kind: "disabled", label: "Disabled" };
  if (slot.draining || agent.draining) return { kind: "draining", label: "Draining" };
  return { kind: "free", label: "Free" };
}

function slotOrder(a: Slot, b: Slot): number {
  const x = Number(a.id);
  const y = Number(b.id);
  return Number.isFinite(x) && Number.isFinite(y) ? x - y : a.id.localeCompare(b.id);
}

/** allocation id -> the agents it runs on. */
function agentsByAllocation(agents: Agent[]): Map<string, Set<string>> {
  const found = new Map<string, Set<string>>();
  for (const agent of agents) {
    for (const slot of Object.values(agent.slots ?? {})) {
      const parent = slot.container?.state !== "STATE_TERMINATED" ? slot.container?.parent : undefined;
      if (!parent) continue;
      if (!found.has(parent)) found.set(parent, new Set());
      found.get(parent)?.add(agent.id);
    }
  }
  return found;
}

function containerRank(containerId: string | undefined): string {
  const rank = containerId?.split(".").pop();
  return rank && /^\d+$/.test(rank) ? rank : "";
}

export function SlotMap(props: { agents: Agent[] }) {
  const spans = agentsByAllocation(props.agents);
  return (
    <div class="slot-map">
      {props.agents.map((agent) => {
        const slots = Object.values(agent.slots ?? {}).sort(slotOrder);
        return (
          <section key={agent.id} class="slot-agent" aria-label={`Slots of agent ${agent.id}`}>
            <h3>
              {agent.id} <span class="muted">{slots.length} slots</span>
            </h3>
            <ul class="slots">
              {slots.map((slot) => {
                const { kind, label } = slotState(slot, agent);
                const allocation = slot.container?.state !== "STATE_TERMINATED" ? slot.container?.parent : undefined;
                const parsed = allocation ? parseAllocationId(allocation) : null;
                const agentsOfIt = allocation ? (spans.get(allocation)?.size ?? 1) : 1;
                const rank = agentsOfIt > 1 ? containerRank(slot.container?.id) : "";
                const device = slot.device ? `${slot.device.type.replace(/^TYPE_/, "")} ${slot.device.brand}` : "";
                return (
                  <li
                    key={slot.id}
                    class={`slot slot-${kind}`}
                    data-slot-state={kind}
                    title={`Slot ${slot.id}: ${label}${slot.unhealthy ? ` (${slot.unhealthy})` : ""}${device ? ` · ${device}` : ""}`}
                  >
                    <span class="slot-id">#{slot.id}</span>
                    <span class="slot-state">{label}</span>
                    {slot.unhealthy ? <span class="slot-reason">{slot.unhealthy}</span> : null}
                    {allocation ? (
                      parsed ? (
                        <Link href={`/trials/${parsed.trialId}`} class="slot-alloc">
                          {allocation}
                        </Link>
                      ) : (
                        <span class="slot-alloc">{allocation}</span>
                      )
                    ) : null}
                    {rank ? (
                      <span class="slot-rank" title={`container ${rank} of ${agentsOfIt}, one per agent`}>
                        container {rank}/{agentsOfIt}
                      </span>
                    ) : null}
                  </li>
                );
              })}
            </ul>
          </section>
        );
      })}
    </div>
  );
}

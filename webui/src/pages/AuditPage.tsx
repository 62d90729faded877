// The audit trail (admins): every change made through the master's API, newest first, with who
// made it, what it named, where from and how it ended; filtered by user, time, method, outcome and
// target (kept in the address, so a filtered view can be linked), a page at a time going back.

import { useEffect, useState } from "preact/hooks";
import { getAuditEvents } from "../api/endpoints";
import type { AuditEvent } from "../api/types";
import { DataTable } from "../components/DataTable";
import { ErrorNote } from "../components/ErrorNote";
import { FilterSelect } from "../components/Filters";
import { formatTime, num, printable } from "../format";
import { usePoll } from "../hooks";
import { setQuery, useLocation } from "../router";

const PAGE_SIZE = 50;
const POLL_MS = 10000;

const OUTCOMES = [
  { value: "", label: "All outcomes" },
  { value: "ok", label: "OK" },
  { value: "failed", label: "Failed" },
  { value: "PERMISSION_DENIED", label: "Permission denied" },
  { value: "UNAUTHENTICATED", label: "Unauthenticated" },
  { value: "NOT_FOUND", label: "Not found" },
  { value: "INVALID_ARGUMENT", label: "Invalid argument" },
];

interface Filters {
  user: string;
  since: string; // a datetime-local value, this browser's time
  method: string;
  outcome: string;
  target: string;
}

function filtersOf(query: URLSearchParams): Filters {
  return {
    user: query.get("user") ?? "",
    since: query.get("since") ?? "",
    method: query.get("method") ?? "",
    outcome: query.get("outcome") ?? "",
    target: query.get("target") ?? "",
  };
}

/** A datetime-local value ("2026-12-03T10:00") as RFC 3339, or undefined when empty or invalid. */
function rfc3339(local: string): string | undefined {
  if (!local) return undefined;
  const moment = new Date(local);
  return Number.isNaN(moment.getTime()) ? undefined : moment.toISOString();
}

export function AuditPage(props: { admin: boolean }) {
  const { query } = useLocation();
  const applied = filtersOf(query);
  const before = query.get("before") ?? "";
  const [draft, setDraft] = useState<Filters>(applied);
  const key = query.toString();
  useEffect(() => setDraft(filtersOf(new URLSearchParams(key))), [key]);

  const { data, error } = usePoll(
    (signal) =>
      getAuditEvents(
        {
          username: applied.user || undefined,
          since: rfc3339(applied.since),
          method: applied.method || undefined,
          outcome: applied.outcome || undefined,
          target: applied.target || undefined,
          limit: PAGE_SIZE,
          beforeId: before || undefined,
        },
        signal,
      ),
    // Read once (to say why not) where the caller may not read it; polled where they may.
    before || !props.admin ? 0 : POLL_MS,
    [key, props.admin],
  );
  const events = data?.events ?? [];
  const older = data?.nextBeforeId && data.nextBeforeId !== "0" ? data.nextBeforeId : "";
  const filtered = Boolean(applied.user || applied.since || applied.method || applied.outcome || applied.target);

  const apply = (e: Event) => {
    e.preventDefault();
    setQuery({ ...draft, before: null });
  };
  const field = (name: keyof Filters) => (e: Event) =>
    setDraft({ ...draft, [name]: (e.target as HTMLInputElement | HTMLSelectElement).value });

  return (
    <section aria-labelledby="audit-title">
      <div class="page-head">
        <h1 id="audit-title">Audit trail</h1>
        <span class="hint">Every change made through the master's API: who, what, from where, how it ended.</span>
      </div>
      {!props.admin ? <p class="hint">Only admins may read the audit trail.</p> : null}
      <form class="filters" aria-label="Audit filters" onSubmit={apply}>
        <label>
          User <input type="text" name="user" value={draft.user} onInput={field("user")} size={12} />
        </label>
        <label>
          Since <input type="datetime-local" name="since" value={draft.since} onInput={field("since")} />
        </label>
        <label>
          Method <input type="text" name="method" value={draft.method} onInput={field("method")} size={14} placeholder="Kill" />
        </label>
        <FilterSelect
          label="Outcome"
          name="outcome"
          value={draft.outcome}
          choices={OUTCOMES}
          onChange={(outcome) => setDraft({ ...draft, outcome })}
        />
        <label>
          Target{" "}
          <input
            type="text"
            name="target"
            value={draft.target}
            onInput={field("target")}
            size={16}
            placeholder="experiment_id=7"
          />
        </label>
        <button type="submit" class="primary">
          Apply
        </button>
        {filtered ? (
          <button type="button" onClick={() => setQuery({ user: null, since: null, method: null, outcome: null, target: null, before: null })}>
            Clear
          </button>
        ) : null}
      </form>
      <ErrorNote error={error} what="the audit trail" />
      <DataTable
        columns={["Time", "Who", "Action", "Targets", "Outcome", "From"]}
        describedBy="audit-title"
        empty={
          data && events.length === 0 ? (filtered ? "No recorded calls match the filters." : "Nothing recorded yet.") : null
        }
      >
        {events.map((event) => (
          <AuditRow key={event.id} event={event} />
        ))}
      </DataTable>
      <nav class="pager" aria-label="Audit pages">
        <button type="button" disabled={!before} onClick={() => setQuery({ before: null })}>
          ‹ Newest
        </button>
        <button type="button" disabled={!older} onClick={() => setQuery({ before: older })}>
          Older ›
        </button>
      </nav>
    </section>
  );
}

function who(event: AuditEvent): string {
  if (event.actor === "allocation") return `allocation ${event.allocationId}`;
  if (event.actor === "anonymous") return event.username ? `${event.username} (not logged in)` : "(not logged in)";
  return event.username || event.actor;
}

function AuditRow(props: { event: AuditEvent }) {
  const e = props.event;
  const ok = e.outcome === "OK";
  const ms = num(e.durationMs);
  return (
    <tr data-audit-id={e.id} data-method={e.method}>
      <td>{formatTime(e.time)}</td>
      <td>{printable(who(e))}</td>
      <td>
        <code>{printable(e.method)}</code>
        {e.route ? <div class="hint">{printable(e.route)}</div> : null}
      </td>
      <td>
        {Object.entries(e.targets ?? {}).map(([k, v]) => (
          <span key={k} class="tag">
            {printable(`${k}=${v}`)}
          </span>
        ))}
      </td>
      <td>
        <span class={`badge ${ok ? "badge-completed" : "badge-error"}`} title={ms === null ? undefined : `${ms} ms`}>
          {printable(e.outcome)}
        </span>
        {e.error ? <div class="hint">{printable(e.error)}</div> : null}
      </td>
      <td>
        {printable(e.address)} {e.transport ? <span class="muted">({printable(e.transport)})</span> : null}
      </td>
    </tr>
  );
}

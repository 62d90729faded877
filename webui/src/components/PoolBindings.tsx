// The workspaces a resource pool is bound to (a bound pool takes work only from them), and for an
// admin an editor: add and remove workspaces, then apply, which binds the pool to exactly those
// (none: shared by the whole cluster again). A refusal is shown as the master words it, and the
// bindings stay as they were.

import { useState } from "preact/hooks";
import { replacePoolBindings } from "../api/endpoints";
import type { Workspace } from "../api/types";
import { printable } from "../format";
import { Link } from "./Link";

function workspaceName(id: number, workspaces: Workspace[]): string {
  const found = workspaces.find((w) => w.id === id);
  return found ? printable(found.name) : `workspace ${id}`;
}

function BindingsEditor(props: {
  pool: string;
  bound: number[];
  workspaces: Workspace[];
  onDone: (changed: boolean) => void;
}) {
  const [chosen, setChosen] = useState<number[]>(props.bound);
  const [adding, setAdding] = useState("");
  const [error, setError] = useState("");
  const [busy, setBusy] = useState(false);
  const addable = props.workspaces.filter((w) => !w.archived && !chosen.includes(w.id));

  const apply = async () => {
    setBusy(true);
    setError("");
    try {
      await replacePoolBindings(props.pool, chosen);
      props.onDone(true);
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e));
    } finally {
      setBusy(false);
    }
  };

  return (
    <div class="bindings-editor" aria-label={`Bindings of pool ${printable(props.pool)}`} role="group">
      <ul class="chips">
        {chosen.map((id) => (
          <li key={id} class="chip" data-binding-pending={workspaceName(id, props.workspaces)}>
            {workspaceName(id, props.workspaces)}
            <button
              type="button"
              class="chip-remove"
              aria-label={`Remove ${workspaceName(id, props.workspaces)}`}
              onClick={() => setChosen(chosen.filter((c) => c !== id))}
            >
              ×
            </button>
          </li>
        ))}
        {chosen.length === 0 ? <li class="muted">No workspace: the pool is shared by the whole cluster.</li> : null}
      </ul>
      <div class="actions">
        <label>
          Workspace{" "}
          <select value={adding} onChange={(e) => setAdding((e.target as HTMLSelectElement).value)}>
            <option value="">Choose…</option>
            {addable.map((w) => (
              <option key={w.id} value={String(w.id)}>
                {printable(w.name)}
              </option>
            ))}
          </select>
        </label>
        <button
          type="button"
          disabled={!adding}
          onClick={() => {
            setChosen([...chosen, Number(adding)]);
            setAdding("");
          }}
        >
          Add
        </button>
        <button type="button" class="primary" disabled={busy} onClick={apply}>
          Apply
        </button>
        <button type="button" disabled={busy} onClick={() => props.onDone(false)}>
          Cancel
        </button>
      </div>
      {error ? (
        <p class="error-note" role="alert">
          {error}
        </p>
      ) : null}
    </div>
  );
}

export function PoolBindings(props: {
  pool: string;
  bound: number[];
  workspaces: Workspace[];
  admin: boolean;
  /** A default pool cannot be bound (the master refuses it). */
  bindable: boolean;
  onChanged: () => void;
}) {
  const [editing, setEditing] = useState(false);
  const { bound, workspaces } = props;
  return (
    <div class="pool-bindings">
      <p data-field="bound-workspaces">
        {bound.length === 0 ? (
          <span class="muted">Not bound: shared by every workspace.</span>
        ) : (
          <>
            Bound to{" "}
            {bound.map((id, index) => (
              <span key={id}>
                {index > 0 ? ", " : ""}
                <Link href={`/workspaces/${id}`}>{workspaceName(id, workspaces)}</Link>
              </span>
            ))}
          </>
        )}
        {props.admin && props.bindable && !editing ? (
          <button type="button" class="inline-button" onClick={() => setEditing(true)}>
            Manage bindings
          </button>
        ) : null}
      </p>
      {editing ? (
        <BindingsEditor
          pool={props.pool}
          bound={bound}
          workspaces={workspaces}
          onDone={(changed) => {
            setEditing(false);
            if (changed) props.onChanged();
          }}
        />
      ) : null}
    </div>
  );
}

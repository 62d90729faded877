import { useEffect, useRef, useState } from "preact/hooks";
import { getResourcePools, launchNotebook } from "../api/endpoints";
import type { ResourcePool } from "../api/types";
import { printable } from "../format";

// Determined's notebook launcher offers slots up to what one task asks for in practice; the
// master checks the real bound against the pool.
const MAX_SLOTS = 64;

/** Opens the task's waiting page, which moves on to /proxy/{task_id}/ once the service answers. */
export function taskOpenPath(taskId: string): string {
  return `/tasks/${encodeURIComponent(taskId)}/open`;
}

/**
 * Launches a JupyterLab notebook with the chosen slots and resource pool (POST /api/v1/notebooks,
 * as Determined's WebUI does), then opens it in a new tab once it is ready. The tab is opened in
 * the click itself (browsers block windows opened later) and pointed at the notebook after the
 * master answers; it is closed again if the launch fails.
 */
export function NotebookLaunchDialog(props: { open: boolean; onClose: () => void; onLaunched: () => void }) {
  const ref = useRef<HTMLDialogElement>(null);
  const [pools, setPools] = useState<ResourcePool[]>([]);
  const [slots, setSlots] = useState("1");
  const [pool, setPool] = useState("");
  const [description, setDescription] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState("");

  useEffect(() => {
    const dialog = ref.current;
    if (!dialog) return undefined;
    if (!props.open) {
      if (dialog.open) dialog.close();
      return undefined;
    }
    if (!dialog.open) {
      setError("");
      dialog.showModal();
    }
    const controller = new AbortController();
    getResourcePools(controller.signal)
      .then((response) => {
        const found = response.resourcePools ?? [];
        setPools(found);
        setPool((chosen) => chosen || (found.find((p) => p.defaultComputePool) ?? found[0])?.name || "");
      })
      .catch(() => setPools([]));
    return () => controller.abort();
  }, [props.open]);

  const submit = async (event: Event) => {
    event.preventDefault();
    const count = Number(slots);
    if (!Number.isInteger(count) || count < 0 || count > MAX_SLOTS) {
      setError(`Slots must be a whole number from 0 to ${MAX_SLOTS}`);
      return;
    }
    const tab = window.open("", "_blank");
    setBusy(true);
    setError("");
    try {
      const { notebook } = await launchNotebook(count, pool, description.trim());
      if (tab) {
        tab.opener = null;
        tab.location.href = taskOpenPath(notebook.id);
      }
      props.onLaunched();
      props.onClose();
    } catch (err) {
      tab?.close();
      setError(err instanceof Error ? err.message : String(err));
    } finally {
      setBusy(false);
    }
  };

  return (
    <dialog
      ref={ref}
      class="dialog"
      aria-labelledby="launch-notebook-title"
      onCancel={(event) => {
        event.preventDefault();
        props.onClose();
      }}
    >
      <form onSubmit={submit}>
        <h2 id="launch-notebook-title">Launch JupyterLab</h2>
        <div class="dialog-body">
          <label for="notebook-slots">Slots</label>
          <input
            id="notebook-slots"
            type="number"
            min={0}
            max={MAX_SLOTS}
            step={1}
            value={slots}
            onInput={(e) => setSlots((e.target as HTMLInputElement).value)}
          />
          <label for="notebook-pool">Resource pool</label>
          <select id="notebook-pool" value={pool} onChange={(e) => setPool((e.target as HTMLSelectElement).value)}>
            {pools.length === 0 ? <option value="">Default pool</option> : null}
            {pools.map((p) => (
              <option key={p.name} value={p.name}>
                {printable(p.name)} ({p.slotsAvailable - p.slotsUsed} of {p.slotsAvailable} slots free)
              </option>
            ))}
          </select>
          <label for="notebook-description">Name (optional)</label>
          <input
            id="notebook-description"
            value={description}
            maxLength={256}
            onInput={(e) => setDescription((e.target as HTMLInputElement).value)}
          />
          <p class="muted">It opens in a new tab once JupyterLab answers; a notebook with 0 slots runs on the pool's auxiliary capacity.</p>
          {error ? (
            <p class="error-note" role="alert">
              {error}
            </p>
          ) : null}
        </div>
        <div class="dialog-actions">
          <button type="button" onClick={props.onClose}>
            Cancel
          </button>
          <button type="submit" class="primary" disabled={busy}>
            Launch
          </button>
        </div>
      </form>
    </dialog>
  );
}

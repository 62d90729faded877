import { useState } from "preact/hooks";
import { type ExperimentAction, experimentAction } from "../api/endpoints";
import type { Experiment } from "../api/types";
import { isTerminal } from "../format";
import { ConfirmDialog } from "./ConfirmDialog";

const RUNNING = new Set(["ACTIVE", "QUEUED", "PULLING", "STARTING", "RUNNING"]);

const CONFIRM: Partial<Record<ExperimentAction, { title: string; text: string }>> = {
  kill: {
    title: "Kill experiment?",
    text: "Every trial stops at once, without a checkpoint. Work since each trial's last checkpoint is lost.",
  },
  cancel: {
    title: "Cancel experiment?",
    text: "Trials checkpoint and stop; no new trials start. A canceled experiment cannot be resumed.",
  },
};

/** The lifecycle buttons that make sense in the experiment's state. */
export function ExperimentActions(props: { experiment: Experiment; onChanged: () => void }) {
  const e = props.experiment;
  const state = e.state.replace(/^STATE_/, "");
  const [pending, setPending] = useState<ExperimentAction | null>(null);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState("");

  const run = async (action: ExperimentAction) => {
    setPending(null);
    setBusy(true);
    setError("");
    try {
      await experimentAction(e.id, action);
      props.onChanged();
    } catch (err) {
      setError(`${action} failed: ${err instanceof Error ? err.message : String(err)}`);
    } finally {
      setBusy(false);
    }
  };
  const ask = (action: ExperimentAction) => (CONFIRM[action] ? setPending(action) : void run(action));

  const buttons: { action: ExperimentAction; label: string; danger?: boolean }[] = [];
  if (RUNNING.has(state)) buttons.push({ action: "pause", label: "Pause" });
  if (state === "PAUSED") buttons.push({ action: "activate", label: "Activate" });
  if (RUNNING.has(state) || state === "PAUSED") buttons.push({ action: "cancel", label: "Cancel" });
  if (!isTerminal(state) && state !== "STOPPING_KILLED") buttons.push({ action: "kill", label: "Kill", danger: true });
  if (isTerminal(state)) {
    buttons.push(e.archived ? { action: "unarchive", label: "Unarchive" } : { action: "archive", label: "Archive" });
  }
  const confirm = pending ? CONFIRM[pending] : undefined;

  return (
    <div class="actions" role="group" aria-label="Experiment actions">
      {buttons.map((b) => (
        <button
          key={b.action}
          type="button"
          class={b.danger ? "danger" : ""}
          disabled={busy}
          onClick={() => ask(b.action)}
        >
          {b.label}
        </button>
      ))}
      {error ? (
        <span class="error-note" role="alert">
          {error}
        </span>
      ) : null}
      <ConfirmDialog
        open={pending !== null}
        title={confirm?.title ?? ""}
        confirmLabel={pending === "kill" ? "Kill" : "Cancel experiment"}
        danger
        onConfirm={() => pending && void run(pending)}
        onCancel={() => setPending(null)}
      >
        <p>
          {confirm?.text} Experiment {e.id} “{e.name}”.
        </p>
      </ConfirmDialog>
    </div>
  );
}

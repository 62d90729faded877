import { useState } from "preact/hooks";
import { type ExperimentAction, continueExperiment, experimentAction, forkExperiment } from "../api/endpoints";
import type { Experiment, JsonObject } from "../api/types";
import { isTerminal, printable } from "../format";
import { navigate } from "../router";
import { ConfirmDialog } from "./ConfirmDialog";
import { TensorboardButton } from "./TensorboardButton";
import { TextDialog } from "./TextDialog";

// What the continue dialog starts from: the searcher length to train on to, as Determined's
// `det experiment continue --config` overrides it.
function continueTemplate(config: JsonObject): string {
  const searcher = (config.searcher ?? {}) as Record<string, unknown>;
  const length = searcher.max_length;
  if (length && typeof length === "object") {
    const [unit, value] = Object.entries(length as Record<string, unknown>)[0] ?? ["batches", 0];
    return `searcher:\n  max_length:\n    ${unit}: ${Number(value) * 2}\n`;
  }
  if (typeof length === "number") return `searcher:\n  max_length: ${length * 2}\n`;
  return "searcher:\n  max_length:\n    batches: 1000\n";
}

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
export function ExperimentActions(props: { experiment: Experiment; config?: JsonObject; onChanged: () => void }) {
  const e = props.experiment;
  const state = e.state.replace(/^STATE_/, "");
  const [pending, setPending] = useState<ExperimentAction | null>(null);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState("");
  const [dialog, setDialog] = useState<"fork" | "continue" | null>(null);

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
  // Determined continues single-trial searches only, once they have ended.
  const canContinue = isTerminal(state) && e.searcherType === "single" && !e.archived;

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
      <button type="button" disabled={busy} onClick={() => setDialog("fork")}>
        Fork
      </button>
      <TensorboardButton experimentId={e.id} />
      {canContinue ? (
        <button type="button" disabled={busy} onClick={() => setDialog("continue")}>
          Continue
        </button>
      ) : null}
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
          {confirm?.text} Experiment {e.id} “{printable(e.name)}”.
        </p>
      </ConfirmDialog>
      <TextDialog
        open={dialog === "fork"}
        title="Fork experiment"
        label="Configuration of the new experiment"
        initial={e.originalConfig ?? ""}
        multiline
        submitLabel="Create experiment"
        onClose={() => setDialog(null)}
        onSubmit={async (config) => {
          const created = await forkExperiment(e.id, config);
          setDialog(null);
          navigate(`/experiments/${created.experiment.id}`);
        }}
      >
        <p>A new experiment with the code of experiment {e.id} and this configuration.</p>
      </TextDialog>
      <TextDialog
        open={dialog === "continue"}
        title="Continue training"
        label="Configuration changes (YAML)"
        initial={continueTemplate(props.config ?? e.config ?? {})}
        multiline
        submitLabel="Continue"
        onClose={() => setDialog(null)}
        onSubmit={async (overrideConfig) => {
          await continueExperiment(e.id, overrideConfig);
          setDialog(null);
          props.onChanged();
        }}
      >
        <p>The trial resumes from its latest checkpoint, in place, with these changes to the configuration.</p>
      </TextDialog>
    </div>
  );
}

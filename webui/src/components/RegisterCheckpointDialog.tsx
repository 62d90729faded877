import { useEffect, useRef, useState } from "preact/hooks";
import { getModels, registerModelVersion } from "../api/endpoints";
import type { Model } from "../api/types";
import { Link } from "./Link";
import { printable } from "../format";

/** Registers a checkpoint as the next version of a model chosen from the registry. */
export function RegisterCheckpointDialog(props: { uuid: string | null; onClose: () => void }) {
  const ref = useRef<HTMLDialogElement>(null);
  const [models, setModels] = useState<Model[] | null>(null);
  const [chosen, setChosen] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState("");
  const [done, setDone] = useState<{ model: string; version: number } | null>(null);

  useEffect(() => {
    const dialog = ref.current;
    if (!dialog) return;
    if (props.uuid && !dialog.open) {
      setError("");
      setDone(null);
      setModels(null);
      dialog.showModal();
      const controller = new AbortController();
      getModels(
        { sortBy: "SORT_BY_NAME", orderBy: "ORDER_BY_ASC", offset: 0, limit: 500, archived: false },
        controller.signal,
      )
        .then((response) => {
          setModels(response.models);
          setChosen(response.models[0]?.name ?? "");
        })
        .catch((err) => setError(err instanceof Error ? err.message : String(err)));
      return () => controller.abort();
    }
    if (!props.uuid && dialog.open) dialog.close();
    return undefined;
  }, [props.uuid]);

  const submit = async (event: Event) => {
    event.preventDefault();
    if (!props.uuid || !chosen) return;
    setBusy(true);
    setError("");
    try {
      const response = await registerModelVersion(chosen, props.uuid);
      setDone({ model: chosen, version: response.modelVersion.version });
    } catch (err) {
      setError(err instanceof Error ? err.message : String(err));
    } finally {
      setBusy(false);
    }
  };

  return (
    <dialog
      ref={ref}
      class="dialog"
      aria-labelledby="register-title"
      onCancel={(event) => {
        event.preventDefault();
        props.onClose();
      }}
    >
      <form onSubmit={submit}>
        <h2 id="register-title">Register checkpoint</h2>
        <div class="dialog-body">
          <p>
            Checkpoint <code>{props.uuid?.slice(0, 8)}</code> becomes the next version of the model. A registered checkpoint
            is never garbage collected.
          </p>
          {models && models.length === 0 ? (
            <p>
              No models yet: <Link href="/models">create one in the model registry</Link>.
            </p>
          ) : (
            <label>
              Model{" "}
              <select value={chosen} onChange={(e) => setChosen((e.target as HTMLSelectElement).value)} disabled={!models}>
                {(models ?? []).map((m) => (
                  <option key={m.name} value={m.name}>
                    {printable(m.name)}
                  </option>
                ))}
              </select>
            </label>
          )}
          {done ? (
            <p role="status">
              Registered as <Link href={`/models/${encodeURIComponent(done.model)}`}>{`${done.model} version ${done.version}`}</Link>.
            </p>
          ) : null}
          {error ? (
            <p class="error-note" role="alert">
              {error}
            </p>
          ) : null}
        </div>
        <div class="dialog-actions">
          <button type="button" onClick={props.onClose}>
            {done ? "Close" : "Cancel"}
          </button>
          {done ? null : (
            <button type="submit" class="primary" disabled={busy || !chosen}>
              Register
            </button>
          )}
        </div>
      </form>
    </dialog>
  );
}

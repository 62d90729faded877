import { useState } from "preact/hooks";
import { printable } from "../format";

/** Labels as removable chips and a field to add one; every change is saved as the whole list. */
export function LabelEditor(props: { labels: string[]; onSave: (labels: string[]) => Promise<void> }) {
  const [draft, setDraft] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState("");

  const save = async (labels: string[]) => {
    setBusy(true);
    setError("");
    try {
      await props.onSave(labels);
      setDraft("");
    } catch (err) {
      setError(err instanceof Error ? err.message : String(err));
    } finally {
      setBusy(false);
    }
  };
  const add = (event: Event) => {
    event.preventDefault();
    const label = draft.trim();
    if (!label || props.labels.includes(label)) return setDraft("");
    void save([...props.labels, label]);
  };

  return (
    <div class="labels">
      <ul class="chips" aria-label="Labels">
        {props.labels.map((label) => (
          <li key={label} class="chip">
            {printable(label)}
            <button
              type="button"
              aria-label={`Remove label ${printable(label)}`}
              disabled={busy}
              onClick={() => void save(props.labels.filter((l) => l !== label))}
            >
              ×
            </button>
          </li>
        ))}
      </ul>
      <form onSubmit={add} class="inline-form">
        <input
          aria-label="New label"
          placeholder="Add a label"
          value={draft}
          maxLength={255}
          onInput={(e) => setDraft((e.target as HTMLInputElement).value)}
        />
        <button type="submit" disabled={busy || !draft.trim()}>
          Add
        </button>
      </form>
      {error ? (
        <span class="error-note" role="alert">
          {error}
        </span>
      ) : null}
    </div>
  );
}

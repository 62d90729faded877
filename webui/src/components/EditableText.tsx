import { useState } from "preact/hooks";
import { printable } from "../format";

/**
 * A value shown as text with an Edit button; editing swaps in a field with Save and Cancel. The
 * shown value is the server's: it changes once the save succeeded and the caller reloaded it.
 */
export function EditableText(props: {
  label: string;
  value: string;
  placeholder: string;
  multiline?: boolean;
  required?: boolean;
  onSave: (value: string) => Promise<void>;
}) {
  const [draft, setDraft] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState("");

  const save = async (event: Event) => {
    event.preventDefault();
    if (draft === null) return;
    if (props.required && !draft.trim()) {
      setError(`${props.label} must not be empty`);
      return;
    }
    setBusy(true);
    setError("");
    try {
      await props.onSave(draft);
      setDraft(null);
    } catch (err) {
      setError(err instanceof Error ? err.message : String(err));
    } finally {
      setBusy(false);
    }
  };

  if (draft === null) {
    return (
      <div class="editable">
        {props.value ? (
          props.multiline ? (
            <pre class="notes">{printable(props.value, { keepNewlines: true })}</pre>
          ) : (
            <span>{printable(props.value)}</span>
          )
        ) : (
          <span class="muted">{props.placeholder}</span>
        )}{" "}
        <button type="button" class="link-button" aria-label={`Edit ${props.label.toLowerCase()}`} onClick={() => setDraft(props.value)}>
          Edit
        </button>
      </div>
    );
  }
  return (
    <form class="editable editing" onSubmit={save}>
      {props.multiline ? (
        <textarea
          aria-label={props.label}
          rows={10}
          value={draft}
          onInput={(e) => setDraft((e.target as HTMLTextAreaElement).value)}
        />
      ) : (
        <input aria-label={props.label} value={draft} onInput={(e) => setDraft((e.target as HTMLInputElement).value)} />
      )}
      <button type="submit" class="primary" disabled={busy}>
        Save
      </button>
      <button type="button" onClick={() => (setDraft(null), setError(""))}>
        Cancel
      </button>
      {error ? (
        <span class="error-note" role="alert">
          {error}
        </span>
      ) : null}
    </form>
  );
}

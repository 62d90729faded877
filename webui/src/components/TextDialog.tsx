import type { ComponentChildren } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";

/**
 * A modal form on the native <dialog> around one text field (a config, a name): the caller's
 * `onSubmit` runs the request; its error stays in the dialog so the user can fix the text.
 */
export function TextDialog(props: {
  open: boolean;
  title: string;
  label: string;
  initial: string;
  multiline?: boolean;
  submitLabel: string;
  onSubmit: (text: string) => Promise<void>;
  onClose: () => void;
  children?: ComponentChildren;
}) {
  const ref = useRef<HTMLDialogElement>(null);
  const [text, setText] = useState(props.initial);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState("");
  useEffect(() => {
    const dialog = ref.current;
    if (!dialog) return;
    if (props.open && !dialog.open) {
      setText(props.initial);
      setError("");
      dialog.showModal();
    }
    if (!props.open && dialog.open) dialog.close();
  }, [props.open]);

  const submit = async (event: Event) => {
    event.preventDefault();
    setBusy(true);
    setError("");
    try {
      await props.onSubmit(text);
    } catch (err) {
      setError(err instanceof Error ? err.message : String(err));
    } finally {
      setBusy(false);
    }
  };
  const fieldId = `text-dialog-${props.title.replace(/\W+/g, "-").toLowerCase()}`;
  return (
    <dialog
      ref={ref}
      class="dialog wide"
      aria-labelledby={`${fieldId}-title`}
      onCancel={(event) => {
        event.preventDefault();
        props.onClose();
      }}
    >
      <form onSubmit={submit}>
        <h2 id={`${fieldId}-title`}>{props.title}</h2>
        <div class="dialog-body">
          {props.children}
          <label for={fieldId}>{props.label}</label>
          {props.multiline ? (
            <textarea
              id={fieldId}
              rows={16}
              spellcheck={false}
              value={text}
              onInput={(e) => setText((e.target as HTMLTextAreaElement).value)}
            />
          ) : (
            <input id={fieldId} value={text} onInput={(e) => setText((e.target as HTMLInputElement).value)} />
          )}
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
            {props.submitLabel}
          </button>
        </div>
      </form>
    </dialog>
  );
}

import type { ComponentChildren } from "preact";
import { useEffect, useRef } from "preact/hooks";

/** A modal confirmation on the native <dialog>: focus is trapped and Escape cancels. */
export function ConfirmDialog(props: {
  open: boolean;
  title: string;
  confirmLabel: string;
  danger?: boolean;
  onConfirm: () => void;
  onCancel: () => void;
  children: ComponentChildren;
}) {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const dialog = ref.current;
    if (!dialog) return;
    if (props.open && !dialog.open) dialog.showModal();
    if (!props.open && dialog.open) dialog.close();
  }, [props.open]);
  return (
    <dialog
      ref={ref}
      class="dialog"
      aria-labelledby="confirm-title"
      onCancel={(event) => {
        event.preventDefault();
        props.onCancel();
      }}
    >
      <h2 id="confirm-title">{props.title}</h2>
      <div class="dialog-body">{props.children}</div>
      <div class="dialog-actions">
        <button type="button" onClick={props.onCancel} autofocus>
          Cancel
        </button>
        <button type="button" class={props.danger ? "danger" : "primary"} onClick={props.onConfirm}>
          {props.confirmLabel}
        </button>
      </div>
    </dialog>
  );
}

import { useState } from "preact/hooks";
import { launchTensorboard } from "../api/endpoints";
import { taskOpenPath } from "./NotebookLaunchDialog";

/**
 * "Open TensorBoard" for one experiment: POST /api/v1/tensorboards with its id (Determined's
 * route), then a new tab that waits for the TensorBoard task and opens it through the master's
 * proxy. The tab is opened in the click itself, as browsers block windows opened later.
 */
export function TensorboardButton(props: { experimentId: number }) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState("");
  const open = async () => {
    const tab = window.open("", "_blank");
    setBusy(true);
    setError("");
    try {
      const { tensorboard } = await launchTensorboard([props.experimentId]);
      if (tab) {
        tab.opener = null;
        tab.location.href = taskOpenPath(tensorboard.id);
      }
    } catch (err) {
      tab?.close();
      setError(`TensorBoard failed: ${err instanceof Error ? err.message : String(err)}`);
    } finally {
      setBusy(false);
    }
  };
  return (
    <>
      <button type="button" disabled={busy} onClick={() => void open()}>
        Open TensorBoard
      </button>
      {error ? (
        <span class="error-note" role="alert">
          {error}
        </span>
      ) : null}
    </>
  );
}

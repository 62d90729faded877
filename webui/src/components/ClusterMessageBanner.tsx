// The cluster-wide message an admin set (`det master cluster-message set`), shown above every page
// while it is showing, as Determined's WebUI shows it. The master decides what shows (started, not
// ended); the banner asks again every minute so a message appears and goes without a reload.

import { useEffect, useState } from "preact/hooks";
import { getMaster } from "../api/endpoints";
import type { ClusterMessage } from "../api/types";
import { printable } from "../format";

const REFRESH_MS = 60_000;

export function ClusterMessageBanner() {
  const [message, setMessage] = useState<ClusterMessage | null>(null);

  useEffect(() => {
    const controller = new AbortController();
    const load = () =>
      getMaster(controller.signal)
        .then((master) => setMessage(master.clusterMessage ?? null))
        .catch(() => {
          // Keep what is shown: a master that did not answer once has not cleared its message.
        });
    load();
    const timer = window.setInterval(load, REFRESH_MS);
    return () => {
      controller.abort();
      window.clearInterval(timer);
    };
  }, []);

  if (!message || !message.message) return null;
  return (
    <div class="cluster-message" role="status" aria-label="Cluster message">
      {printable(message.message)}
    </div>
  );
}

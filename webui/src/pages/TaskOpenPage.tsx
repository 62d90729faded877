// The page a notebook or TensorBoard opens on in its new tab: it waits until the task's service
// answers (GetTask: the allocation's is_ready, set when the service itself says so), then moves on
// to the master's proxy, /proxy/{task_id}/, which the browser's session cookie authenticates.

import { useEffect, useState } from "preact/hooks";
import { getTask } from "../api/endpoints";
import { ApiError, isAbort } from "../api/http";
import type { TaskDetail } from "../api/types";
import { ErrorNote } from "../components/ErrorNote";
import { Link } from "../components/Link";
import { StateBadge } from "../components/StateBadge";
import { formatDuration, printable } from "../format";

const POLL_MS = 1500;
// Past this the page says the task is slow to start, and keeps waiting.
const SLOW_MS = 5 * 60_000;

export function proxyPath(taskId: string): string {
  return `/proxy/${encodeURIComponent(taskId)}/`;
}

export function TaskOpenPage(props: { taskId: string }) {
  const [task, setTask] = useState<TaskDetail | undefined>(undefined);
  const [error, setError] = useState<Error | undefined>(undefined);
  const [since] = useState(Date.now());
  const [now, setNow] = useState(Date.now());

  useEffect(() => {
    const controller = new AbortController();
    let timer: number | undefined;
    const poll = async () => {
      try {
        const { task: found } = await getTask(props.taskId, controller.signal);
        setTask(found);
        setError(undefined);
        const latest = found.allocations?.[found.allocations.length - 1];
        if (!found.endTime && latest?.isReady) {
          location.replace(proxyPath(props.taskId));
          return;
        }
        if (found.endTime) return;
      } catch (e) {
        if (isAbort(e)) return;
        setError(e instanceof Error ? e : new Error(String(e)));
        if (e instanceof ApiError && e.status === 404) return; // no such task: nothing to wait for
      }
      setNow(Date.now());
      timer = window.setTimeout(poll, POLL_MS);
    };
    void poll();
    return () => {
      controller.abort();
      window.clearTimeout(timer);
    };
  }, [props.taskId]);

  const latest = task?.allocations?.[task.allocations.length - 1];
  const waited = now - since;
  return (
    <section aria-labelledby="task-open-title">
      <h1 id="task-open-title">Opening task {printable(props.taskId)}</h1>
      <ErrorNote error={error} what="the task" />
      {task?.endTime ? (
        <p role="status">
          The task has ended{latest?.exitReason ? `: ${printable(latest.exitReason)}` : ""}. <Link href="/tasks">Back to the tasks</Link>
        </p>
      ) : (
        <p role="status">
          {latest ? <StateBadge state={latest.state} /> : null} Waiting for its service to answer… ({formatDuration(waited)})
          {waited > SLOW_MS ? " It is taking long: the task's logs say why (det task logs)." : ""}
        </p>
      )}
    </section>
  );
}

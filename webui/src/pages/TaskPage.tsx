// One task of any kind (a notebook, shell, command, TensorBoard, generic task or a trial's): what it
// is, its allocations, and what its containers cost the machine (SystemMetrics).

import { getTask } from "../api/endpoints";
import type { TaskDetail } from "../api/types";
import { ErrorNote } from "../components/ErrorNote";
import { Link } from "../components/Link";
import { StateBadge } from "../components/StateBadge";
import { SystemMetrics } from "../components/SystemMetrics";
import { durationBetween, formatDuration, formatTime, printable } from "../format";
import { usePoll } from "../hooks";

const POLL_MS = 3000;

export function TaskPage(props: { taskId: string }) {
  const poll = usePoll((signal) => getTask(props.taskId, signal), POLL_MS, [props.taskId]);
  const task = poll.data?.task;
  const title = `Task ${printable(props.taskId)}`;
  if (!task) {
    return (
      <section>
        <h1>{title}</h1>
        {poll.error ? <ErrorNote error={poll.error} what={`task ${props.taskId}`} /> : <p>Loading…</p>}
      </section>
    );
  }
  const live = !task.endTime;
  const latest = task.allocations?.[task.allocations.length - 1];
  return (
    <section aria-labelledby="task-title">
      <nav class="crumbs" aria-label="Breadcrumb">
        <Link href="/tasks">Tasks</Link> › {printable(task.taskId)}
      </nav>
      <div class="page-head">
        <h1 id="task-title">{title}</h1>
        {latest ? <StateBadge state={latest.state} /> : null}
      </div>
      <ErrorNote error={poll.error} what="the task" />
      <TaskFacts task={task} />
      <h2>System metrics</h2>
      <SystemMetrics taskId={task.taskId} live={live} />
    </section>
  );
}

function TaskFacts(props: { task: TaskDetail }) {
  const t = props.task;
  const allocations = t.allocations ?? [];
  const latest = allocations[allocations.length - 1];
  return (
    <dl class="facts">
      <div>
        <dt>Kind</dt>
        <dd>{printable(t.taskType) || "–"}</dd>
      </div>
      <div>
        <dt>Started</dt>
        <dd>{formatTime(t.startTime)}</dd>
      </div>
      <div>
        <dt>Duration</dt>
        <dd>{formatDuration(durationBetween(t.startTime, t.endTime))}</dd>
      </div>
      <div>
        <dt>Allocations</dt>
        <dd>{allocations.length}</dd>
      </div>
      <div>
        <dt>Slots</dt>
        <dd>{latest ? latest.slots : "–"}</dd>
      </div>
      <div>
        <dt>Exit</dt>
        <dd>{printable(latest?.exitReason) || "–"}</dd>
      </div>
    </dl>
  );
}

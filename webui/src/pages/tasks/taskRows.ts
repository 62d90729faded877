// The tasks page's rows: every task that is not a trial, from the listing of each kind (owner,
// state, pool, start time), with the slots of the live ones from GetTasks. Generic tasks have no
// listing of their own (as in Determined): they are the live allocations whose task GetTask names
// TASK_TYPE_GENERIC.

import { type TaskKind, getLiveAllocations, getTask, getTasksOfKind } from "../../api/endpoints";
import type { AllocationSummary, CommandLike } from "../../api/types";

export interface TaskRow {
  kind: TaskKind;
  id: string;
  name: string;
  state: string;
  owner: string;
  /** Slots of its live allocation; null once it has ended (only live allocations are listed). */
  slots: number | null;
  pool: string;
  startTime?: string;
}

export const KIND_LABELS: Record<TaskKind, string> = {
  notebook: "Notebook",
  tensorboard: "TensorBoard",
  shell: "Shell",
  command: "Command",
  generic: "Generic task",
};

/** Kinds whose service a browser opens through the master's proxy at /proxy/{task_id}/. */
export const SERVING_KINDS: ReadonlySet<TaskKind> = new Set(["notebook", "tensorboard"]);

const LISTED_KINDS = ["notebook", "tensorboard", "shell", "command"] as const;

// A trial's task id is "<experiment id>.<trial id>"; those stay on the experiment pages.
const TRIAL_TASK_ID = /^\d+\.\d+$/;

// A task's kind never changes: remember the kinds that are not listed here (trials' are skipped by
// id, checkpoint GC by this), so GetTask is asked once per such task. Bounded, oldest forgotten.
const OTHER_KINDS_LIMIT = 2000;
const otherKinds = new Set<string>();

function rememberOther(taskId: string): void {
  if (otherKinds.size >= OTHER_KINDS_LIMIT) {
    const oldest = otherKinds.values().next().value;
    if (oldest !== undefined) otherKinds.delete(oldest);
  }
  otherKinds.add(taskId);
}

function fromListing(kind: TaskKind, task: CommandLike, live: AllocationSummary | undefined): TaskRow {
  return {
    kind,
    id: task.id,
    name: task.description,
    state: task.state,
    owner: task.displayName || task.username,
    slots: live ? live.slotsNeeded : null,
    pool: task.resourcePool || live?.resourcePool || "",
    startTime: task.startTime,
  };
}

async function genericRows(unlisted: AllocationSummary[], signal: AbortSignal): Promise<TaskRow[]> {
  const rows: TaskRow[] = [];
  for (const summary of unlisted) {
    if (TRIAL_TASK_ID.test(summary.taskId) || otherKinds.has(summary.taskId)) continue;
    const { task } = await getTask(summary.taskId, signal);
    if (task.taskType !== "TASK_TYPE_GENERIC") {
      rememberOther(summary.taskId);
      continue;
    }
    const latest = task.allocations?.[task.allocations.length - 1];
    rows.push({
      kind: "generic",
      id: summary.taskId,
      name: summary.name,
      state: latest?.state ?? "STATE_QUEUED",
      owner: "",
      slots: summary.slotsNeeded,
      pool: summary.resourcePool,
      startTime: task.startTime ?? summary.registeredTime,
    });
  }
  return rows;
}

export interface TaskListing {
  rows: TaskRow[];
  /** One line per kind whose listing failed: the other kinds are still shown. */
  failures: string[];
}

/** Every task of every kind, newest first. */
export async function loadTaskRows(signal: AbortSignal): Promise<TaskListing> {
  const [live, ...lists] = await Promise.all([
    getLiveAllocations(signal),
    ...LISTED_KINDS.map((kind) =>
      getTasksOfKind(kind, signal).then(
        (tasks) => ({ tasks, failure: "" }),
        (error: unknown) => {
          if (signal.aborted) throw error;
          const message = error instanceof Error ? error.message : String(error);
          return { tasks: [] as CommandLike[], failure: `${KIND_LABELS[kind]}s: ${message}` };
        },
      ),
    ),
  ]);
  const liveByTask = new Map(live.map((summary) => [summary.taskId, summary]));
  const rows = LISTED_KINDS.flatMap((kind, i) =>
    lists[i].tasks.map((task) => fromListing(kind, task, liveByTask.get(task.id))),
  );
  const listed = new Set(rows.map((row) => row.id));
  rows.push(...(await genericRows(live.filter((s) => !listed.has(s.taskId)), signal)));
  const started = (row: TaskRow) => (row.startTime ? new Date(row.startTime).getTime() || 0 : 0);
  rows.sort((a, b) => started(b) - started(a) || a.id.localeCompare(b.id));
  return { rows, failures: lists.map((list) => list.failure).filter(Boolean) };
}

/** Whether the task has ended (its latest allocation terminated). */
export function hasEnded(row: TaskRow): boolean {
  return row.state.replace(/^STATE_/, "") === "TERMINATED";
}

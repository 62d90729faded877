// Tasks that are not trials: notebooks, TensorBoards, shells, commands and generic tasks, with
// their state, owner, slots, pool and start time; open (serving kinds, through the master's proxy)
// and kill (asked first); a JupyterLab launcher. The master lists each kind whole, so the page
// filters and pages the merged list itself; it is refreshed every few seconds.

import { useState } from "preact/hooks";
import { killTask } from "../api/endpoints";
import type { TaskKind } from "../api/endpoints";
import { ConfirmDialog } from "../components/ConfirmDialog";
import { DataTable } from "../components/DataTable";
import { ErrorNote } from "../components/ErrorNote";
import { type Choice, FilterSelect, chosen, setFilter } from "../components/Filters";
import { Link } from "../components/Link";
import { NotebookLaunchDialog, taskOpenPath } from "../components/NotebookLaunchDialog";
import { Pager, queryOffset, setQueryOffset } from "../components/Pager";
import { StateBadge } from "../components/StateBadge";
import { formatTime, printable } from "../format";
import { usePoll } from "../hooks";
import { useLocation } from "../router";
import { KIND_LABELS, SERVING_KINDS, type TaskRow, hasEnded, loadTaskRows } from "./tasks/taskRows";

const PAGE_SIZE = 25;
const POLL_MS = 3000;

const KIND_FILTERS: Choice[] = [
  { value: "", label: "All kinds" },
  ...(Object.keys(KIND_LABELS) as TaskKind[]).map((k) => ({ value: k, label: KIND_LABELS[k] })),
];

const STATE_FILTERS = [
  { value: "", label: "All states", keep: (_: TaskRow) => true },
  { value: "active", label: "Active", keep: (row: TaskRow) => !hasEnded(row) },
  { value: "ended", label: "Ended", keep: hasEnded },
];

export function TasksPage() {
  const { query } = useLocation();
  const kind = (query.get("kind") ?? "") as TaskKind | "";
  const stateFilter = chosen(STATE_FILTERS, query.get("state"));
  const offset = queryOffset(query);
  const { data, error, refresh } = usePoll(loadTaskRows, POLL_MS, []);
  const [launching, setLaunching] = useState(false);
  const [killing, setKilling] = useState<TaskRow | null>(null);
  const [actionError, setActionError] = useState("");

  const shown = (data?.rows ?? []).filter((row) => (!kind || row.kind === kind) && stateFilter.keep(row));
  const page = shown.slice(offset, offset + PAGE_SIZE);

  const kill = async (row: TaskRow) => {
    setKilling(null);
    setActionError("");
    try {
      await killTask(row.kind, row.id);
      refresh();
    } catch (err) {
      setActionError(`Kill of ${printable(row.id)} failed: ${err instanceof Error ? err.message : String(err)}`);
    }
  };

  return (
    <section aria-labelledby="tasks-title">
      <div class="page-head">
        <h1 id="tasks-title">Tasks</h1>
        <div class="filters">
          <FilterSelect label="Kind" value={kind} choices={KIND_FILTERS} onChange={(value) => setFilter("kind", value)} />
          <FilterSelect
            label="State"
            value={stateFilter.value}
            choices={STATE_FILTERS}
            onChange={(value) => setFilter("state", value)}
          />
          <button type="button" class="primary" onClick={() => setLaunching(true)}>
            Launch JupyterLab
          </button>
        </div>
      </div>
      <ErrorNote error={error} what="tasks" />
      {data?.failures.map((failure) => (
        <p key={failure} class="error-note" role="alert">
          Could not load {failure}
        </p>
      ))}
      {actionError ? (
        <p class="error-note" role="alert">
          {actionError}
        </p>
      ) : null}
      <DataTable
        columns={["Kind", "Name", "State", "Owner", "Slots", "Resource pool", "Started", "Actions"]}
        describedBy="tasks-title"
        empty={
          data && shown.length === 0 ? (
            <>
              No tasks{kind || stateFilter.value ? " match the filters" : ""}. Launch a notebook here, or run{" "}
              <code>det cmd run 'echo hello'</code>.
            </>
          ) : null
        }
      >
        {page.map((row) => (
          <TaskTableRow key={row.id} row={row} onKill={() => setKilling(row)} />
        ))}
      </DataTable>
      <Pager
        label="Task pages"
        offset={offset}
        limit={PAGE_SIZE}
        total={shown.length}
        onChange={setQueryOffset}
      />
      <ConfirmDialog
        open={killing !== null}
        title="Kill task?"
        confirmLabel="Kill"
        danger
        onConfirm={() => killing && void kill(killing)}
        onCancel={() => setKilling(null)}
      >
        <p>
          {killing ? KIND_LABELS[killing.kind] : ""} {printable(killing?.name) || printable(killing?.id)} stops at once; what it has
          not saved is lost.
        </p>
      </ConfirmDialog>
      <NotebookLaunchDialog open={launching} onClose={() => setLaunching(false)} onLaunched={refresh} />
    </section>
  );
}

function TaskTableRow(props: { row: TaskRow; onKill: () => void }) {
  const { row } = props;
  const ended = hasEnded(row);
  return (
    <tr data-task-id={row.id} data-task-kind={row.kind}>
      <td>{KIND_LABELS[row.kind]}</td>
      <td>
        <Link href={`/tasks/${encodeURIComponent(row.id)}`}>{printable(row.name) || printable(row.id)}</Link>
        <div class="muted mono" title="Task id">
          {printable(row.id)}
        </div>
      </td>
      <td>
        <StateBadge state={row.state} />
      </td>
      <td>{printable(row.owner) || <span class="muted">–</span>}</td>
      <td class="num">{row.slots ?? "–"}</td>
      <td>{printable(row.pool) || "–"}</td>
      <td>{formatTime(row.startTime)}</td>
      <td class="row-actions">
        {SERVING_KINDS.has(row.kind) && !ended ? (
          <a class="button" href={taskOpenPath(row.id)} target="_blank" rel="noopener noreferrer">
            Open
          </a>
        ) : null}
        {row.kind === "shell" && !ended ? <code title="Open it from a terminal">det shell open {printable(row.id)}</code> : null}
        {!ended ? (
          <button type="button" class="danger" onClick={props.onKill}>
            Kill
          </button>
        ) : null}
      </td>
    </tr>
  );
}

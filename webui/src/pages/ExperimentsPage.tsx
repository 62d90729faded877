// The experiments list: server-side sort, state filter and paging (GetExperiments), archived
// toggle, refreshed every few seconds. The view is kept in the URL so it survives a reload.

import { getExperiments, getWorkspaceProjects, getWorkspaces } from "../api/endpoints";
import type { Experiment, Project } from "../api/types";
import { DataTable } from "../components/DataTable";
import { ErrorNote } from "../components/ErrorNote";
import { ArchivedToggle, type Choice, FilterSelect, chosen, setFilter, showsArchived } from "../components/Filters";
import { Link } from "../components/Link";
import { Pager, queryOffset, setQueryOffset } from "../components/Pager";
import { ProgressBar } from "../components/ProgressBar";
import { type Sort, SortHeader } from "../components/SortHeader";
import { StateBadge } from "../components/StateBadge";
import { durationBetween, formatDuration, formatMetric, formatTime, num, printable } from "../format";
import { usePoll } from "../hooks";
import { setQuery, useLocation } from "../router";

const PAGE_SIZE = 25;
const POLL_MS = 4000;

// Column key → GetExperimentsRequest.SortBy.
const SORT_BY: Record<string, string> = {
  id: "SORT_BY_ID",
  name: "SORT_BY_NAME",
  state: "SORT_BY_STATE",
  progress: "SORT_BY_PROGRESS",
  trials: "SORT_BY_NUM_TRIALS",
  metric: "SORT_BY_SEARCHER_METRIC_VAL",
  user: "SORT_BY_USER",
  start: "SORT_BY_START_TIME",
};

// What the filter offers, and the stored states each choice covers.
const STATE_FILTERS: { label: string; value: string; states: string[] }[] = [
  { label: "All states", value: "", states: [] },
  { label: "Active", value: "active", states: ["STATE_ACTIVE"] },
  { label: "Paused", value: "paused", states: ["STATE_PAUSED"] },
  {
    label: "Stopping",
    value: "stopping",
    states: ["STATE_STOPPING_COMPLETED", "STATE_STOPPING_CANCELED", "STATE_STOPPING_KILLED", "STATE_STOPPING_ERROR"],
  },
  { label: "Completed", value: "completed", states: ["STATE_COMPLETED"] },
  { label: "Canceled", value: "canceled", states: ["STATE_CANCELED"] },
  { label: "Error", value: "error", states: ["STATE_ERROR"] },
];

/** Every project the user can file experiments under, workspace by workspace. */
async function allProjects(signal: AbortSignal): Promise<Project[]> {
  const { workspaces } = await getWorkspaces(signal);
  const lists = await Promise.all(workspaces.map((w) => getWorkspaceProjects(w.id, signal)));
  return lists.flatMap((list, i) =>
    list.projects.map((p) => ({ ...p, workspaceName: p.workspaceName || workspaces[i].name })),
  );
}

export function ExperimentsPage() {
  const { query } = useLocation();
  const sort: Sort = { key: query.get("sort") ?? "id", desc: query.get("order") !== "asc" };
  const offset = queryOffset(query);
  const stateFilter = chosen(STATE_FILTERS, query.get("state"));
  const archived = showsArchived(query);
  const projectId = Number(query.get("project") ?? 0) || undefined;
  const projects = usePoll(allProjects, 60000, []);
  const projectChoices: Choice[] = [
    { value: "", label: "All projects" },
    ...(projects.data ?? []).map((p) => ({
      value: String(p.id),
      label: (
        <>
          {p.workspaceName ? `${printable(p.workspaceName)} › ` : ""}
          {printable(p.name)}
        </>
      ),
    })),
    // One the address names that is not (or not yet) listed.
    ...(projectId && !(projects.data ?? []).some((p) => p.id === projectId)
      ? [{ value: String(projectId), label: <>project {projectId}</> }]
      : []),
  ];

  const { data, error } = usePoll(
    (signal) =>
      getExperiments(
        {
          sortBy: SORT_BY[sort.key] ?? "SORT_BY_ID",
          orderBy: sort.desc ? "ORDER_BY_DESC" : "ORDER_BY_ASC",
          offset,
          limit: PAGE_SIZE,
          states: stateFilter.states,
          // Unset shows both; the toggle adds archived ones to the unarchived.
          archived: archived ? undefined : false,
          projectId,
        },
        signal,
      ),
    POLL_MS,
    [sort.key, sort.desc, offset, stateFilter.value, archived, projectId],
  );

  const experiments = data?.experiments ?? [];
  const total = data?.pagination?.total ?? experiments.length;

  return (
    <section aria-labelledby="experiments-title">
      <div class="page-head">
        <h1 id="experiments-title">Experiments</h1>
        <div class="filters">
          <FilterSelect
            label="Project"
            value={projectId ? String(projectId) : ""}
            choices={projectChoices}
            onChange={(value) => setFilter("project", value)}
          />
          <FilterSelect
            label="State"
            value={stateFilter.value}
            choices={STATE_FILTERS}
            onChange={(value) => setFilter("state", value)}
          />
          <ArchivedToggle archived={archived} />
        </div>
      </div>
      <ErrorNote error={error} what="experiments" />
      <DataTable
        columns={[
          ...(
            [
              ["id", "ID"],
              ["name", "Name"],
              ["state", "State"],
              ["progress", "Progress"],
              ["trials", "Trials"],
              ["metric", "Best metric"],
              ["user", "User"],
              ["start", "Started"],
            ] as const
          ).map(([key, label]) => (
            <SortHeader
              key={key}
              sortKey={key}
              sort={sort}
              onSort={(s) => setQuery({ sort: s.key, order: s.desc ? null : "asc", offset: null })}
            >
              {label}
            </SortHeader>
          )),
          "Duration",
        ]}
        describedBy="experiments-title"
        empty={
          data && experiments.length === 0 ? (
            <>
              No experiments{stateFilter.value ? ` in state “${stateFilter.label}”` : ""}. Create one with{" "}
              <code>cairn experiment create config.yaml .</code>
            </>
          ) : null
        }
      >
        {experiments.map((e) => (
          <ExperimentRow key={e.id} experiment={e} />
        ))}
      </DataTable>
      <Pager
        label="Experiment pages"
        offset={offset}
        limit={PAGE_SIZE}
        total={total}
        onChange={setQueryOffset}
      />
    </section>
  );
}

function ExperimentRow(props: { experiment: Experiment }) {
  const e = props.experiment;
  const metric = num(e.bestTrialSearcherMetric);
  return (
    <tr data-experiment-id={e.id}>
      <td class="num">
        <Link href={`/experiments/${e.id}`}>{e.id}</Link>
      </td>
      <td>
        <Link href={`/experiments/${e.id}`}>{printable(e.name) || `Experiment ${e.id}`}</Link>
        {e.archived ? <span class="tag">archived</span> : null}
      </td>
      <td>
        <StateBadge state={e.state} />
      </td>
      <td>
        <ProgressBar value={num(e.progress)} label={`Progress of experiment ${e.id}`} />
      </td>
      <td class="num">{e.numTrials}</td>
      <td class="num" title={e.searcherMetric}>
        {formatMetric(metric)}
        {metric !== null && e.searcherMetric ? <span class="muted"> {e.searcherMetric}</span> : null}
      </td>
      <td>{printable(e.username)}</td>
      <td>{formatTime(e.startTime)}</td>
      <td class="num">{formatDuration(e.duration ?? durationBetween(e.startTime, e.endTime))}</td>
    </tr>
  );
}

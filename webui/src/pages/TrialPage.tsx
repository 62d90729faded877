// One trial: state, restarts, allocation and hyperparameters; a chart per metric; followed logs;
// checkpoints; its system metrics (the Profiler tab).

import { getTrial, getTrialCheckpoints } from "../api/endpoints";
import type { Trial } from "../api/types";
import { CheckpointRows } from "../components/CheckpointRows";
import { ErrorNote } from "../components/ErrorNote";
import { Link } from "../components/Link";
import { LogViewer } from "../components/LogViewer";
import { StateBadge } from "../components/StateBadge";
import { SystemMetrics } from "../components/SystemMetrics";
import { Tabs } from "../components/Tabs";
import { durationBetween, formatBytes, formatDuration, formatMetric, formatTime, formatValue, isTerminal, num, printable } from "../format";
import { usePoll } from "../hooks";
import { flattenHparams } from "../metrics";
import { setQuery, useLocation } from "../router";
import { TrialMetrics } from "./trial/TrialMetrics";

const TABS = [
  { id: "overview", label: "Overview" },
  { id: "logs", label: "Logs" },
  { id: "checkpoints", label: "Checkpoints" },
  // Determined's name for a trial's system metrics.
  { id: "profiler", label: "Profiler" },
];

export function TrialPage(props: { id: number }) {
  const { query } = useLocation();
  const tab = TABS.some((t) => t.id === query.get("tab")) ? query.get("tab")! : "overview";
  const poll = usePoll((signal) => getTrial(props.id, signal), 3000, [props.id]);
  const trial = poll.data?.trial;
  if (!trial) {
    return (
      <section>
        <h1>Trial {props.id}</h1>
        {poll.error ? <ErrorNote error={poll.error} what={`trial ${props.id}`} /> : <p>Loading…</p>}
      </section>
    );
  }
  const live = !isTerminal(trial.state);
  return (
    <section aria-labelledby="trial-title">
      <nav class="crumbs" aria-label="Breadcrumb">
        <Link href="/experiments">Experiments</Link> ›{" "}
        <Link href={`/experiments/${trial.experimentId}`}>Experiment {trial.experimentId}</Link> › Trial {trial.id}
      </nav>
      <div class="page-head">
        <h1 id="trial-title">Trial {trial.id}</h1>
        <StateBadge state={trial.state} />
      </div>
      <ErrorNote error={poll.error} what="the trial" />
      <TrialFacts trial={trial} />
      <Tabs tabs={TABS} selected={tab} onSelect={(id) => setQuery({ tab: id === "overview" ? null : id })} label="Trial views" />
      <div id={`panel-${tab}`} role="tabpanel" aria-labelledby={`tab-${tab}`} class="panel">
        {tab === "overview" ? (
          <>
            <h2>Hyperparameters</h2>
            <HparamsTable trial={trial} />
            <h2>Metrics</h2>
            <TrialMetrics trialId={trial.id} live={live} />
          </>
        ) : null}
        {tab === "logs" ? <LogViewer trialId={trial.id} /> : null}
        {tab === "checkpoints" ? <TrialCheckpoints trialId={trial.id} live={live} /> : null}
        {tab === "profiler" ? <SystemMetrics taskId={trial.taskId} live={live} /> : null}
      </div>
    </section>
  );
}

function TrialFacts(props: { trial: Trial }) {
  const t = props.trial;
  return (
    <dl class="facts">
      <div>
        <dt>Batches</dt>
        <dd>{t.totalBatchesProcessed}</dd>
      </div>
      <div>
        <dt>Best metric</dt>
        <dd>{formatMetric(num(t.searcherMetricValue))}</dd>
      </div>
      <div>
        <dt>Restarts</dt>
        <dd>{t.restarts}</dd>
      </div>
      <div>
        <dt>Allocation</dt>
        <dd>
          {t.allocationId ? <code>{t.allocationId}</code> : "–"}
          {t.runId ? <span class="muted"> (run {t.runId})</span> : null}
        </dd>
      </div>
      <div>
        <dt>Runner state</dt>
        <dd>{t.runnerState || "–"}</dd>
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
        <dt>Checkpoints</dt>
        <dd>
          {t.checkpointCount} ({formatBytes(t.totalCheckpointSize)})
        </dd>
      </div>
    </dl>
  );
}

function HparamsTable(props: { trial: Trial }) {
  const entries = Object.entries(flattenHparams(props.trial.hparams)).sort(([a], [b]) => a.localeCompare(b));
  if (entries.length === 0) return <p class="empty">No hyperparameters.</p>;
  return (
    <table class="table compact">
      <caption class="visually-hidden">Hyperparameters of trial {props.trial.id}</caption>
      <thead>
        <tr>
          <th scope="col">Name</th>
          <th scope="col">Value</th>
        </tr>
      </thead>
      <tbody>
        {entries.map(([name, value]) => (
          <tr key={name}>
            <th scope="row">{printable(name)}</th>
            <td>{printable(formatValue(value))}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function TrialCheckpoints(props: { trialId: number; live: boolean }) {
  const { data, error } = usePoll((signal) => getTrialCheckpoints(props.trialId, signal), props.live ? 5000 : 0, [
    props.trialId,
    props.live,
  ]);
  return (
    <div>
      <ErrorNote error={error} what="checkpoints" />
      <table class="table">
        <caption class="visually-hidden">Checkpoints of trial {props.trialId}</caption>
        <thead>
          <tr>
            <th scope="col">UUID</th>
            <th scope="col">Batches</th>
            <th scope="col">State</th>
            <th scope="col">Size</th>
            <th scope="col">Searcher metric</th>
            <th scope="col">Reported</th>
          </tr>
        </thead>
        <tbody>
          <CheckpointRows checkpoints={data?.checkpoints ?? []} loaded={data !== undefined} showTrial={false} />
        </tbody>
      </table>
    </div>
  );
}

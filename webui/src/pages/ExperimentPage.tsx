// One experiment: its header and actions, then learning curves, trials, hyperparameter scatter
// plots, checkpoints and configuration in tabs. The experiment and its trials are polled here and
// shared by the tabs.

import { getExperiment, getExperimentTrials, patchExperiment } from "../api/endpoints";
import type { ExperimentPatch } from "../api/types";
import { EditableText } from "../components/EditableText";
import { LabelEditor } from "../components/LabelEditor";
import { ErrorNote } from "../components/ErrorNote";
import { ExperimentActions } from "../components/ExperimentActions";
import { ProgressBar } from "../components/ProgressBar";
import { StateBadge } from "../components/StateBadge";
import { Tabs } from "../components/Tabs";
import { durationBetween, formatBytes, formatDuration, formatMetric, formatTime, isTerminal, num, printable } from "../format";
import { usePoll } from "../hooks";
import { setQuery, useLocation } from "../router";
import { CheckpointsTable } from "./experiment/CheckpointsTable";
import { HparamScatter } from "./experiment/HparamScatter";
import { LearningCurves } from "./experiment/LearningCurves";
import { TrialsTable } from "./experiment/TrialsTable";
import { Link } from "../components/Link";

const TABS = [
  { id: "curves", label: "Learning curves" },
  { id: "trials", label: "Trials" },
  { id: "hparams", label: "Hyperparameters" },
  { id: "checkpoints", label: "Checkpoints" },
  { id: "notes", label: "Notes" },
  { id: "config", label: "Configuration" },
];

export function ExperimentPage(props: { id: number }) {
  const { query } = useLocation();
  const tab = TABS.some((t) => t.id === query.get("tab")) ? query.get("tab")! : "curves";
  const experimentPoll = usePoll((signal) => getExperiment(props.id, signal), 3000, [props.id]);
  const experiment = experimentPoll.data?.experiment;
  const terminal = experiment ? isTerminal(experiment.state) : false;
  const trialsPoll = usePoll((signal) => getExperimentTrials(props.id, signal), terminal ? 30000 : 5000, [props.id]);
  const trials = trialsPoll.data?.trials ?? [];

  if (!experiment) {
    return (
      <section>
        <h1>Experiment {props.id}</h1>
        {experimentPoll.error ? <ErrorNote error={experimentPoll.error} what={`experiment ${props.id}`} /> : <p>Loading…</p>}
      </section>
    );
  }
  const e = experiment;
  // Every edit is a PatchExperiment of the changed field; the page then shows what was stored.
  const edit = async (fields: ExperimentPatch) => {
    await patchExperiment(e.id, fields);
    experimentPoll.refresh();
  };
  const config = experimentPoll.data?.config ?? e.config ?? {};
  const searcher = (config.searcher ?? {}) as Record<string, unknown>;

  return (
    <section aria-labelledby="experiment-title">
      <nav class="crumbs" aria-label="Breadcrumb">
        <Link href="/experiments">Experiments</Link> › Experiment {e.id}
      </nav>
      <div class="page-head">
        <h1 id="experiment-title">
          {printable(e.name) || `Experiment ${e.id}`} <span class="muted">#{e.id}</span>
        </h1>
        <StateBadge state={e.state} />
        <ExperimentActions experiment={e} config={config} onChanged={experimentPoll.refresh} />
      </div>
      <ErrorNote error={experimentPoll.error} what="the experiment" />
      <dl class="facts">
        <div>
          <dt>Progress</dt>
          <dd>
            <ProgressBar value={num(e.progress)} label="Experiment progress" />
          </dd>
        </div>
        <div>
          <dt>Project</dt>
          <dd>
            {e.projectId ? (
              <>
                {e.workspaceName && e.workspaceId ? (
                  <>
                    <Link href={`/workspaces/${e.workspaceId}`} title="The workspace's weights and quotas">
                      {printable(e.workspaceName)}
                    </Link>
                    {" › "}
                  </>
                ) : e.workspaceName ? (
                  `${printable(e.workspaceName)} › `
                ) : (
                  ""
                )}
                <Link href={`/experiments?project=${e.projectId}`}>{printable(e.projectName) || `project ${e.projectId}`}</Link>
              </>
            ) : (
              "–"
            )}
          </dd>
        </div>
        {e.forkedFrom ? (
          <div>
            <dt>Forked from</dt>
            <dd>
              <Link href={`/experiments/${e.forkedFrom}`}>experiment {e.forkedFrom}</Link>
            </dd>
          </div>
        ) : null}
        <div>
          <dt>Searcher</dt>
          <dd>{e.searcherType || String(searcher.name ?? "–")}</dd>
        </div>
        <div>
          <dt>Metric</dt>
          <dd>
            {e.searcherMetric || "–"} <span class="muted">({e.smallerIsBetter ? "smaller is better" : "larger is better"})</span>
          </dd>
        </div>
        <div>
          <dt>Best value</dt>
          <dd>
            {formatMetric(num(e.bestTrialSearcherMetric))}
            {e.bestTrialId ? (
              <>
                {" "}
                <Link href={`/trials/${e.bestTrialId}`}>trial {e.bestTrialId}</Link>
              </>
            ) : null}
          </dd>
        </div>
        <div>
          <dt>Trials</dt>
          <dd>{e.numTrials}</dd>
        </div>
        <div>
          <dt>Resource pool</dt>
          <dd>{printable(e.resourcePool) || "–"}</dd>
        </div>
        <div>
          <dt>User</dt>
          <dd>{printable(e.username)}</dd>
        </div>
        <div>
          <dt>Started</dt>
          <dd>{formatTime(e.startTime)}</dd>
        </div>
        <div>
          <dt>Duration</dt>
          <dd>{formatDuration(e.duration ?? durationBetween(e.startTime, e.endTime))}</dd>
        </div>
        <div>
          <dt>Checkpoints</dt>
          <dd>
            {e.checkpointCount} ({formatBytes(e.checkpointSize)})
          </dd>
        </div>
      </dl>
      <dl class="about">
        <div>
          <dt>Name</dt>
          <dd>
            <EditableText label="Name" value={e.name} placeholder="No name" required onSave={(name) => edit({ name })} />
          </dd>
        </div>
        <div>
          <dt>Description</dt>
          <dd>
            <EditableText
              label="Description"
              value={e.description}
              placeholder="No description"
              onSave={(description) => edit({ description })}
            />
          </dd>
        </div>
        <div>
          <dt>Labels</dt>
          <dd>
            <LabelEditor labels={e.labels ?? []} onSave={(labels) => edit({ labels })} />
          </dd>
        </div>
      </dl>
      <Tabs tabs={TABS} selected={tab} onSelect={(id) => setQuery({ tab: id === "curves" ? null : id })} label="Experiment views" />
      <div id={`panel-${tab}`} role="tabpanel" aria-labelledby={`tab-${tab}`} class="panel">
        {tab === "curves" ? <LearningCurves experiment={e} trials={trials} /> : null}
        {tab === "trials" ? <TrialsTable experiment={e} trials={trials} error={trialsPoll.error} /> : null}
        {tab === "hparams" ? <HparamScatter experiment={e} trials={trials} config={config} /> : null}
        {tab === "checkpoints" ? <CheckpointsTable experiment={e} /> : null}
        {tab === "notes" ? (
          <EditableText
            label="Notes"
            value={e.notes ?? ""}
            placeholder="No notes yet. Notes are kept with the experiment (Markdown text)."
            multiline
            onSave={(notes) => edit({ notes })}
          />
        ) : null}
        {tab === "config" ? <pre class="config">{e.originalConfig || JSON.stringify(config, null, 2)}</pre> : null}
      </div>
    </section>
  );
}

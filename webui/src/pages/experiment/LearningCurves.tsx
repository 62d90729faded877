// Learning curves of the experiment's best trials from the TrialsSample stream: the master ranks
// and downsamples, and re-sends the sample every few seconds while the experiment runs; each
// message updates the one chart in place.

import { useMemo, useState } from "preact/hooks";
import { streamTrialsSample } from "../../api/endpoints";
import type { Experiment, Trial, TrialsSampleResponse } from "../../api/types";
import { colorFor, XYChart, type XYSeries } from "../../charts/XYChart";
import { ErrorNote } from "../../components/ErrorNote";
import { isTerminal, num } from "../../format";
import { useStream } from "../../hooks";
import { metricChoices } from "../../metrics";
import { navigate } from "../../router";

const TOP_TRIALS = [10, 50, 100, 500, 1000];

export function LearningCurves(props: { experiment: Experiment; trials: Trial[] }) {
  const e = props.experiment;
  const [choice, setChoice] = useState(`validation\u0000${e.searcherMetric}`);
  const [maxTrials, setMaxTrials] = useState(100);
  const [sample, setSample] = useState<TrialsSampleResponse | null>(null);
  const [group, metricName] = choice.split("\u0000");
  const terminal = isTerminal(e.state);

  const choices = useMemo(() => {
    const found = metricChoices(props.trials);
    if (e.searcherMetric && !found.some((c) => c.group === "validation" && c.name === e.searcherMetric)) {
      found.unshift({ group: "validation", name: e.searcherMetric });
    }
    return found;
  }, [props.trials, e.searcherMetric]);

  // Big samples cost the master and the network more: ask for them less often and thinner.
  const periodSeconds = terminal ? 0 : maxTrials > 100 ? 15 : 5;
  const maxDatapoints = maxTrials > 100 ? 500 : 1000;
  const { error } = useStream(
    (signal) =>
      streamTrialsSample(e.id, { metricName, group, maxTrials, maxDatapoints, periodSeconds }, setSample, signal),
    { enabled: Boolean(metricName), retryMs: 5000, reopenAfterEnd: !terminal },
    [e.id, metricName, group, maxTrials, terminal],
  );

  const series = useMemo<XYSeries[]>(() => {
    const trials = [...(sample?.trials ?? [])].sort((a, b) => a.trialId - b.trialId);
    return trials.map((t) => {
      const data = t.data ?? [];
      const xs = new Float64Array(data.length);
      const ys: (number | null)[] = new Array(data.length);
      data.forEach((p, i) => {
        xs[i] = p.batches;
        ys[i] = num(p.value);
      });
      return { key: String(t.trialId), label: `Trial ${t.trialId}`, color: colorFor(t.trialId), xs, ys };
    });
  }, [sample]);
  const points = series.reduce((n, s) => n + s.xs.length, 0);

  return (
    <div class="curves">
      <div class="filters">
        <label>
          Metric{" "}
          <select value={choice} onChange={(ev) => setChoice((ev.target as HTMLSelectElement).value)}>
            {choices.map((c) => (
              <option key={`${c.group}/${c.name}`} value={`${c.group}\u0000${c.name}`}>
                {c.name} ({c.group})
              </option>
            ))}
          </select>
        </label>
        <label>
          Top trials{" "}
          <select value={maxTrials} onChange={(ev) => setMaxTrials(Number((ev.target as HTMLSelectElement).value))}>
            {TOP_TRIALS.map((n) => (
              <option key={n} value={n}>
                {n}
              </option>
            ))}
          </select>
        </label>
        <span class="muted" aria-live="polite" data-testid="curve-summary">
          {sample ? `${series.length} trials, ${points} points` : "Loading…"}
          {!terminal && sample ? " · live" : ""}
        </span>
      </div>
      <ErrorNote error={error} what="learning curves" />
      <XYChart
        series={series}
        kind="lines"
        xLabel="Batches"
        yLabel={metricName}
        ariaLabel={`Learning curves of ${metricName} (${group}) for the top ${maxTrials} trials`}
        height={360}
        onPick={(key) => navigate(`/trials/${key}`)}
      />
      <p class="hint">Drag to zoom, double-click to reset; click a curve to open its trial.</p>
    </div>
  );
}

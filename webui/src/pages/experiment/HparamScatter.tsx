// One scatter plot per hyperparameter that varies across trials: its value against the trial's
// best searcher metric. Numbers get a numeric (or log, for `type: log`) axis, anything else a
// categorical one.

import { useMemo } from "preact/hooks";
import type { Experiment, JsonObject, Trial } from "../../api/types";
import { XYChart, type XYSeries } from "../../charts/XYChart";
import { formatValue, num } from "../../format";
import { flattenHparams } from "../../metrics";
import { navigate } from "../../router";

interface Plot {
  name: string;
  series: XYSeries[];
  categories?: string[];
  log: boolean;
  trialIds: number[];
}

function hparamType(config: JsonObject, name: string): string {
  let node: unknown = config.hyperparameters;
  for (const part of name.split(".")) node = (node as JsonObject | undefined)?.[part];
  return node && typeof node === "object" ? String((node as JsonObject).type ?? "") : "";
}

/** Distinct values as labels, numbers in numeric order. */
function categoriesOf(values: unknown[]): string[] {
  const distinct = [...new Map(values.map((v) => [formatValue(v), v])).entries()];
  distinct.sort(([a, x], [b, y]) => (typeof x === "number" && typeof y === "number" ? x - y : a.localeCompare(b)));
  return distinct.map(([label]) => label);
}

function buildPlots(trials: Trial[], config: JsonObject): { plots: Plot[]; constants: string[] } {
  const scored = trials
    .map((t) => ({ id: t.id, metric: num(t.searcherMetricValue), hparams: flattenHparams(t.hparams) }))
    .filter((t): t is { id: number; metric: number; hparams: Record<string, unknown> } => t.metric !== null);
  const names = [...new Set(trials.flatMap((t) => Object.keys(flattenHparams(t.hparams))))].sort();
  const plots: Plot[] = [];
  const constants: string[] = [];
  for (const name of names) {
    const rows = scored.filter((t) => t.hparams[name] !== undefined);
    const distinct = new Set(trials.map((t) => formatValue(flattenHparams(t.hparams)[name])));
    if (distinct.size <= 1) {
      constants.push(name);
      continue;
    }
    const type = hparamType(config, name);
    const numeric = type !== "categorical" && rows.every((r) => typeof r.hparams[name] === "number");
    const categories = numeric ? undefined : categoriesOf(rows.map((r) => r.hparams[name]));
    const xs = new Float64Array(rows.length);
    const ys = new Float64Array(rows.length);
    rows.forEach((r, i) => {
      xs[i] = categories ? categories.indexOf(formatValue(r.hparams[name])) : (r.hparams[name] as number);
      ys[i] = r.metric;
    });
    const log = numeric && type === "log" && rows.every((r) => (r.hparams[name] as number) > 0);
    plots.push({
      name,
      categories,
      log,
      trialIds: rows.map((r) => r.id),
      series: [{ key: name, label: name, color: "hsl(215 70% 45%)", xs, ys: Array.from(ys) }],
    });
  }
  return { plots, constants };
}

export function HparamScatter(props: { experiment: Experiment; trials: Trial[]; config: JsonObject }) {
  const { plots, constants } = useMemo(() => buildPlots(props.trials, props.config), [props.trials, props.config]);
  const metric = props.experiment.searcherMetric;
  if (plots.length === 0) {
    return (
      <p class="empty">
        {props.trials.length === 0
          ? "No trials yet."
          : "No hyperparameter varies across trials with a validation metric yet."}
      </p>
    );
  }
  return (
    <div>
      <div class="scatter-grid">
        {plots.map((p) => (
          <figure key={p.name} class="scatter">
            <figcaption>
              {p.name} vs. {metric}
            </figcaption>
            <XYChart
              series={p.series}
              kind="points"
              xLabel={p.name}
              yLabel={metric}
              xCategories={p.categories}
              xLog={p.log}
              height={260}
              ariaLabel={`Scatter plot of ${p.name} against ${metric}, one point per trial`}
              onPick={(_key, index) => navigate(`/trials/${p.trialIds[index]}`)}
            />
          </figure>
        ))}
      </div>
      {constants.length ? <p class="hint">The same in every trial: {constants.join(", ")}.</p> : null}
    </div>
  );
}

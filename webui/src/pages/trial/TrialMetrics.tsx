// A chart per metric name with its training and validation series, from GetMetrics (the master
// downsamples each series). Refreshed while the trial runs; each chart updates in place.

import { useMemo } from "preact/hooks";
import { getTrialMetrics } from "../../api/endpoints";
import type { MetricsReport } from "../../api/types";
import { XYChart, type XYSeries } from "../../charts/XYChart";
import { ErrorNote } from "../../components/ErrorNote";
import { usePoll } from "../../hooks";
import { numericValue, reportMetrics } from "../../metrics";

const MAX_DATAPOINTS = 1000;
const GROUPS = [
  { group: "training", color: "hsl(215 75% 45%)" },
  { group: "validation", color: "hsl(25 90% 48%)" },
];

function seriesByMetric(reports: Record<string, MetricsReport[]>): Map<string, XYSeries[]> {
  const points = new Map<string, Map<string, [number[], number[]]>>();
  for (const { group } of GROUPS) {
    for (const report of reports[group] ?? []) {
      for (const [name, raw] of Object.entries(reportMetrics(report.metrics))) {
        const value = numericValue(raw);
        if (value === null) continue;
        const byGroup = points.get(name) ?? new Map<string, [number[], number[]]>();
        points.set(name, byGroup);
        const xy = byGroup.get(group) ?? [[], []];
        byGroup.set(group, xy);
        xy[0].push(report.totalBatches);
        xy[1].push(value);
      }
    }
  }
  const result = new Map<string, XYSeries[]>();
  for (const name of [...points.keys()].sort()) {
    const byGroup = points.get(name)!;
    result.set(
      name,
      GROUPS.filter((g) => byGroup.has(g.group)).map((g) => {
        const [xs, ys] = byGroup.get(g.group)!;
        return { key: g.group, label: g.group, color: g.color, xs, ys };
      }),
    );
  }
  return result;
}

export function TrialMetrics(props: { trialId: number; live: boolean }) {
  const { data, error } = usePoll(
    async (signal) => {
      const [training, validation] = await Promise.all(
        GROUPS.map(({ group }) => getTrialMetrics(props.trialId, group, MAX_DATAPOINTS, signal)),
      );
      return { training, validation };
    },
    props.live ? 5000 : 0,
    [props.trialId, props.live],
  );
  const charts = useMemo(() => seriesByMetric(data ?? {}), [data]);

  if (data && charts.size === 0) return <p class="empty">No metrics reported yet.</p>;
  return (
    <div>
      <ErrorNote error={error} what="metrics" />
      <div class="chart-grid">
        {[...charts.entries()].map(([name, series]) => (
          <figure key={name} class="metric-chart" data-metric={name}>
            <figcaption>
              {name}
              <span class="legend">
                {series.map((s) => (
                  <span key={s.key} class="legend-item">
                    <span class="swatch" style={{ background: s.color }} aria-hidden="true" />
                    {s.label}
                  </span>
                ))}
              </span>
            </figcaption>
            <XYChart
              series={series}
              kind="lines"
              xLabel="Batches"
              yLabel={name}
              height={240}
              ariaLabel={`${name} by batches, ${series.map((s) => s.label).join(" and ")}`}
            />
          </figure>
        ))}
      </div>
    </div>
  );
}

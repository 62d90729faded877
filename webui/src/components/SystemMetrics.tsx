// What a task's containers cost the machine, as its agents sampled them: one chart per metric
// (CPU, memory, disk, network, and each GPU's utilisation, memory and power), a line per agent
// (and GPU), time since the task's first sample on the x axis. Refreshed while the task runs: each
// poll asks only for what was stored after the last reading it has (`afterId`), so a day-long
// task's page does not read its whole day every few seconds.

import { useMemo, useRef } from "preact/hooks";
import { getTaskSystemMetrics } from "../api/endpoints";
import type { SystemMetricSeries } from "../api/types";
import { XYChart, type XYSeries } from "../charts/XYChart";
import { usePoll } from "../hooks";
import { ErrorNote } from "./ErrorNote";

const POLL_MS = 5000;
const MIB = 1024 * 1024;
const TITLES: Record<string, string> = {
  container_cpu_util: "CPU (% of one core)",
  container_memory_used: "Memory (MiB)",
  container_disk_throughput_read: "Disk read (MiB/s)",
  container_disk_throughput_write: "Disk write (MiB/s)",
  container_net_throughput_recv: "Network received (MiB/s)",
  container_net_throughput_sent: "Network sent (MiB/s)",
  container_processes: "Processes",
  container_gpu_util: "GPU utilisation (%)",
  container_gpu_memory_used: "GPU memory (MiB)",
  container_gpu_power: "GPU power (W)",
};
const ORDER = Object.keys(TITLES);
const COLORS = ["hsl(215 75% 45%)", "hsl(25 90% 48%)", "hsl(150 60% 35%)", "hsl(280 55% 50%)", "hsl(0 70% 50%)"];

function scaled(series: SystemMetricSeries): number[] {
  const divisor = series.unit === "bytes" || series.unit === "bytes/s" ? MIB : 1;
  return (series.values ?? []).map((v) => v / divisor);
}

// Seconds on the x axis while the samples span under this, minutes past it.
const SECONDS_UP_TO_MS = 180_000;

function charts(all: SystemMetricSeries[]): { unit: string; shown: [string, XYSeries[]][] } {
  // A loop, not Math.min(...times): a day of an 8-GPU container's readings is past the number of
  // arguments a call may take.
  let start = Infinity;
  let end = -Infinity;
  for (const s of all) {
    for (const t of s.timestamps ?? []) {
      const at = Date.parse(t);
      if (at < start) start = at;
      if (at > end) end = at;
    }
  }
  if (!Number.isFinite(start)) start = end = 0;
  const span = end - start;
  const [unit, perUnit] = span < SECONDS_UP_TO_MS ? ["Seconds", 1000] : ["Minutes", 60_000];
  const byName = new Map<string, XYSeries[]>();
  for (const s of all) {
    const lines = byName.get(s.name) ?? [];
    byName.set(s.name, lines);
    const label = s.gpuUuid ? `${s.agentId} ${s.gpuUuid}` : s.agentId;
    lines.push({
      key: `${s.agentId}/${s.gpuUuid ?? ""}`,
      label,
      color: COLORS[lines.length % COLORS.length],
      xs: (s.timestamps ?? []).map((t) => (Date.parse(t) - start) / perUnit),
      ys: scaled(s),
    });
  }
  const rank = (name: string) => (ORDER.includes(name) ? ORDER.indexOf(name) : ORDER.length);
  return { unit, shown: [...byName.entries()].sort(([a], [b]) => rank(a) - rank(b) || a.localeCompare(b)) };
}

// The most readings a series keeps in the page (the server's own cap: a day at 10 s).
const MAX_READINGS = 8640;

interface Gathered {
  taskId: string;
  lastId: string;
  byKey: Map<string, SystemMetricSeries>;
}

/** Adds a page of readings to what the chart already has, each series capped at MAX_READINGS. */
function gather(into: Gathered, page: SystemMetricSeries[]): void {
  for (const s of page) {
    const key = `${s.name}/${s.agentId}/${s.gpuUuid ?? ""}`;
    const had = into.byKey.get(key);
    const timestamps = [...(had?.timestamps ?? []), ...(s.timestamps ?? [])];
    const values = [...(had?.values ?? []), ...(s.values ?? [])];
    const drop = Math.max(0, timestamps.length - MAX_READINGS);
    into.byKey.set(key, { ...s, timestamps: timestamps.slice(drop), values: values.slice(drop) });
  }
}

export function SystemMetrics(props: { taskId: string; live: boolean }) {
  const gathered = useRef<Gathered | null>(null);
  const load = async (signal: AbortSignal) => {
    if (gathered.current?.taskId !== props.taskId) {
      gathered.current = { taskId: props.taskId, lastId: "0", byKey: new Map() };
    }
    const mine = gathered.current;
    const page = await getTaskSystemMetrics(props.taskId, mine.lastId, signal);
    // An answer to a poll that was called off must not be added twice: the next poll asks again.
    if (!signal.aborted && gathered.current === mine) {
      gather(mine, page.series ?? []);
      mine.lastId = page.lastId ?? mine.lastId;
    }
    return { series: [...mine.byKey.values()], notes: page.notes };
  };
  const { data, error } = usePoll(load, props.live ? POLL_MS : 0, [props.taskId, props.live]);
  const { unit, shown } = useMemo(() => charts(data?.series ?? []), [data]);
  return (
    <div class="system-metrics" data-task-id={props.taskId}>
      <ErrorNote error={error} what="system metrics" />
      {data && shown.length === 0 ? <p class="empty">No system metrics sampled yet.</p> : null}
      <div class="chart-grid">
        {shown.map(([name, series]) => (
          <figure key={name} class="metric-chart" data-system-metric={name}>
            <figcaption>
              {TITLES[name] ?? name}
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
              xLabel={unit}
              yLabel={TITLES[name] ?? name}
              height={200}
              ariaLabel={`${TITLES[name] ?? name} over time, ${series.map((s) => s.label).join(" and ")}`}
            />
          </figure>
        ))}
      </div>
      {(data?.notes ?? []).map((note) => (
        <p key={note} class="muted system-metrics-note">
          {note}
        </p>
      ))}
    </div>
  );
}

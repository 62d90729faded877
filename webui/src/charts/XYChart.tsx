// One canvas chart for every plot of the WebUI: learning curves (many line series, each with its
// own x values), a trial's training and validation curves, and hyperparameter scatter plots.
//
// uPlot's faceted mode (mode 2) keeps each series' own (x, y) arrays, so curves need no shared x
// axis (a thousand downsampled trials rarely share their steps). The chart is created once and
// later data goes in with setData, adding or removing series in place: a poll never rebuilds it.
// With a thousand series a legend would be a thousand DOM rows, so the legend is ours and the
// hover readout finds the nearest point in one pass over the data.

import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { useEffect, useRef } from "preact/hooks";
import { formatMetric } from "../format";

export interface XYSeries {
  key: string;
  label: string;
  color: string;
  xs: ArrayLike<number>;
  ys: ArrayLike<number | null>;
}

export interface XYChartProps {
  series: XYSeries[];
  kind: "lines" | "points";
  xLabel: string;
  yLabel: string;
  ariaLabel: string;
  height?: number;
  /** x values are indexes into these labels (categorical hyperparameters). */
  xCategories?: string[];
  /** Plot x on a log scale (positive values only). */
  xLog?: boolean;
  /** A click on a point: its series' key and the point's index in that series. */
  onPick?: (key: string, pointIndex: number) => void;
}

interface Hover {
  seriesIndex: number;
  pointIndex: number;
}

const AXIS = { stroke: "#4b5563", grid: { stroke: "#e5e7eb", width: 1 }, ticks: { stroke: "#d1d5db" } };

// uPlot's own point drawing walks the shared x index range, which faceted data does not have;
// scatter points are drawn here from the series' own arrays instead.
function scatterPaths(diameter: number): uPlot.Series.PathBuilder {
  return (u, seriesIdx) => {
    const [xs, ys] = (u.data as unknown as [ArrayLike<number>, ArrayLike<number | null>][])[seriesIdx];
    const path = new Path2D();
    const radius = (diameter / 2) * uPlot.pxRatio;
    for (let i = 0; i < xs.length; i++) {
      const y = ys[i];
      if (y === null || !Number.isFinite(y)) continue;
      const cx = u.valToPos(xs[i], "x", true);
      const cy = u.valToPos(y, "y", true);
      path.moveTo(cx + radius, cy);
      path.arc(cx, cy, radius, 0, 2 * Math.PI);
    }
    return { stroke: path, fill: path, clip: undefined, flags: 0 } as unknown as uPlot.Series.Paths;
  };
}

// A line needs two points: a trial with one validation so far, or a point between gaps, would
// draw nothing. Such lone points get a ring on the line's own path.
function linesWithLonePoints(): uPlot.Series.PathBuilder {
  const linear = uPlot.paths.linear!();
  return (u, seriesIdx, idx0, idx1) => {
    const paths = linear(u, seriesIdx, idx0, idx1);
    const stroke = paths?.stroke;
    if (!(stroke instanceof Path2D)) return paths;
    const [xs, ys] = (u.data as unknown as [ArrayLike<number>, ArrayLike<number | null>][])[seriesIdx];
    const radius = 2.5 * uPlot.pxRatio;
    const present = (i: number) => i >= 0 && i < ys.length && ys[i] !== null && Number.isFinite(ys[i]);
    for (let i = 0; i < xs.length; i++) {
      if (!present(i) || present(i - 1) || present(i + 1)) continue;
      const cx = u.valToPos(xs[i], "x", true);
      const cy = u.valToPos(ys[i] as number, "y", true);
      stroke.moveTo(cx + radius, cy);
      stroke.arc(cx, cy, radius, 0, 2 * Math.PI);
    }
    return paths;
  };
}

function seriesOptions(s: XYSeries, kind: XYChartProps["kind"]): uPlot.Series {
  const lines = kind === "lines";
  return {
    label: s.label,
    stroke: lines ? s.color : "rgba(255,255,255,0.9)",
    fill: lines ? undefined : s.color,
    width: lines ? 1.25 : 1,
    paths: lines ? linesWithLonePoints() : scatterPaths(8),
    points: { show: false },
    facets: [
      { scale: "x", auto: true },
      { scale: "y", auto: true },
    ],
  } as uPlot.Series;
}

function chartData(series: XYSeries[]): uPlot.AlignedData {
  // Faceted data: index 0 is unused, then [xs, ys] per series.
  return [null, ...series.map((s) => [s.xs, s.ys])] as unknown as uPlot.AlignedData;
}

/** Room around scatter points so none sits on the frame. */
const paddedRange: uPlot.Range.Function = (_u, min, max) => {
  if (min == null || max == null) return [0, 1];
  const span = max - min || Math.abs(max) || 1;
  return [min - span * 0.08, max + span * 0.08];
};

/**
 * The data's own range, widened when it is a single value: uPlot's faceted mode has no fallback for
 * a zero-width linear x range and throws "Invalid array length" building its ticks — which is what
 * a chart of trials that each have one validation, all at the same step, looks like.
 */
const spanningRange: uPlot.Range.Function = (_u, min, max) => {
  if (min == null || max == null) return [0, 1];
  if (min !== max) return [min, max];
  const pad = Math.abs(min) * 0.1 || 1;
  return [min - pad, max + pad];
};

function categoryRange(categories: string[]): uPlot.Range.Function {
  return () => [-0.5, Math.max(0.5, categories.length - 0.5)];
}

export function XYChart(props: XYChartProps) {
  const host = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const keys = useRef<string[]>([]);
  const latest = useRef(props);
  const hover = useRef<Hover | null>(null);
  const shown = useRef<XYSeries[] | null>(null);
  latest.current = props;

  // Created once per chart kind and axis type; everything else updates the live instance.
  const categoriesKey = props.xCategories ? props.xCategories.join("\u0000") : "";
  // uPlot's faceted mode takes its x scale from the first series: no series, no chart.
  const hasSeries = props.series.length > 0;
  useEffect(() => {
    const element = host.current;
    if (!element || !hasSeries) return undefined;
    // The hover marker and readout live in uPlot's overlay, outside Preact's tree.
    const marker = document.createElement("div");
    marker.className = "chart-marker";
    marker.hidden = true;
    const tip = document.createElement("div");
    tip.className = "chart-tip";
    tip.hidden = true;
    tip.setAttribute("role", "status");
    const categories = props.xCategories;
    const points = props.kind === "points";
    const options: uPlot.Options = {
      mode: 2,
      width: Math.max(240, element.clientWidth),
      height: props.height ?? 300,
      legend: { show: false },
      cursor: { points: { show: false }, drag: { x: true, y: true, uni: 20 } },
      scales: {
        x: {
          time: false,
          auto: !categories,
          distr: props.xLog ? 3 : 1,
          // A log scale pads a single value by itself; a linear one needs it done here.
          range: categories
            ? categoryRange(categories)
            : props.xLog
              ? undefined
              : points
                ? paddedRange
                : spanningRange,
        },
        y: { auto: true, range: points ? paddedRange : undefined },
      },
      axes: [
        {
          ...AXIS,
          label: props.xLabel,
          values: categories
            ? (_u, splits) => splits.map((v) => (Number.isInteger(v) ? (categories[v] ?? "") : ""))
            : undefined,
          splits: categories ? () => categories.map((_, i) => i) : undefined,
        },
        { ...AXIS, label: props.yLabel, size: 70, values: (_u, splits) => splits.map((v) => formatMetric(v)) },
      ],
      series: [{}, ...props.series.map((s) => seriesOptions(s, props.kind))],
      hooks: {
        setCursor: [(u) => scheduleHover(u)],
        setScale: [() => hideHover()],
      },
    };
    const u = new uPlot(options, chartData(props.series), element);
    plot.current = u;
    keys.current = props.series.map((s) => s.key);
    shown.current = props.series;
    u.over.append(marker, tip);

    const observer = new ResizeObserver(() => {
      const width = Math.max(240, element.clientWidth);
      if (Math.abs(width - u.width) > 1) u.setSize({ width, height: u.height });
    });
    observer.observe(element);

    let frame = 0;
    function scheduleHover(chart: uPlot) {
      if (frame) return;
      frame = requestAnimationFrame(() => {
        frame = 0;
        updateHover(chart);
      });
    }

    function hideHover() {
      hover.current = null;
      tip.hidden = true;
      marker.hidden = true;
    }

    // The nearest point to the cursor within 24 px, over every series, in pixel distance.
    function updateHover(chart: uPlot) {
      const left = chart.cursor.left ?? -1;
      const top = chart.cursor.top ?? -1;
      const series = latest.current.series;
      if (left < 0 || top < 0 || series.length === 0) return hideHover();
      const xScale = chart.scales.x;
      const yScale = chart.scales.y;
      if (xScale.min == null || xScale.max == null || yScale.min == null || yScale.max == null) return hideHover();
      const cursorX = chart.posToVal(left, "x");
      const cursorY = chart.posToVal(top, "y");
      const logX = latest.current.xLog === true;
      const width = chart.over.clientWidth;
      const height = chart.over.clientHeight;
      const kx = logX
        ? width / (Math.log10(xScale.max) - Math.log10(xScale.min))
        : width / (xScale.max - xScale.min || 1);
      const ky = height / (yScale.max - yScale.min || 1);
      const cx = logX ? Math.log10(cursorX) : cursorX;
      let best = 24 * 24;
      let found: Hover | null = null;
      for (let si = 0; si < series.length; si++) {
        const { xs, ys } = series[si];
        for (let pi = 0; pi < xs.length; pi++) {
          const y = ys[pi];
          if (y === null) continue;
          const dx = ((logX ? Math.log10(xs[pi]) : xs[pi]) - cx) * kx;
          const dy = (y - cursorY) * ky;
          const d = dx * dx + dy * dy;
          if (d < best) {
            best = d;
            found = { seriesIndex: si, pointIndex: pi };
          }
        }
      }
      hover.current = found;
      if (!found) return hideHover();
      const s = series[found.seriesIndex];
      const x = s.xs[found.pointIndex];
      const y = s.ys[found.pointIndex] as number;
      const px = chart.valToPos(x, "x");
      const py = chart.valToPos(y, "y");
      const categoriesNow = latest.current.xCategories;
      const xText = categoriesNow ? (categoriesNow[x] ?? String(x)) : formatMetric(x);
      marker.hidden = false;
      marker.style.transform = `translate(${px}px, ${py}px)`;
      marker.style.background = s.color;
      tip.hidden = false;
      tip.textContent = `${s.label} · ${latest.current.xLabel} ${xText} · ${latest.current.yLabel} ${formatMetric(y)}`;
      const flip = px > width / 2;
      tip.style.transform = `translate(${flip ? px - 12 : px + 12}px, ${py - 12}px) translateX(${flip ? "-100%" : "0"})`;
    }

    const over = u.over;
    const onClick = () => {
      const picked = hover.current;
      const onPick = latest.current.onPick;
      if (picked && onPick) onPick(latest.current.series[picked.seriesIndex].key, picked.pointIndex);
    };
    const onLeave = () => hideHover();
    over.addEventListener("click", onClick);
    over.addEventListener("mouseleave", onLeave);

    return () => {
      cancelAnimationFrame(frame);
      observer.disconnect();
      over.removeEventListener("click", onClick);
      over.removeEventListener("mouseleave", onLeave);
      u.destroy();
      plot.current = null;
    };
  }, [hasSeries, props.kind, props.xLog, categoriesKey, props.xLabel, props.yLabel, props.height]);

  // New data: keep the instance, reconcile its series with the new keys, then set the data.
  useEffect(() => {
    const u = plot.current;
    if (!u || shown.current === props.series) return;
    shown.current = props.series;
    const next = props.series.map((s) => s.key);
    const same = next.length === keys.current.length && next.every((k, i) => k === keys.current[i]);
    if (!same) {
      // Series are matched by position; rewrite labels and colours, add or drop the tail.
      while (u.series.length - 1 > next.length) u.delSeries(u.series.length - 1);
      props.series.forEach((s, i) => {
        const index = i + 1;
        if (index < u.series.length) {
          const existing = u.series[index];
          existing.label = s.label;
          if (props.kind === "points") (existing as { fill: unknown }).fill = () => s.color;
          else (existing as { stroke: unknown }).stroke = () => s.color;
        } else {
          u.addSeries(seriesOptions(s, props.kind), index);
        }
      });
      keys.current = next;
    }
    u.setData(chartData(props.series), true);
  }, [props.series]);

  return (
    <div class="chart" role="img" aria-label={props.ariaLabel}>
      <div ref={host} class="chart-host" />
      {hasSeries ? null : (
        <p class="empty" style={{ height: `${props.height ?? 300}px` }}>
          No data yet.
        </p>
      )}
    </div>
  );
}

/** A stable, well-spread colour per id (golden-angle hues). */
export function colorFor(id: number): string {
  const hue = Math.round((id * 137.508) % 360);
  return `hsl(${hue} 65% 42%)`;
}

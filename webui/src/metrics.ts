// Reading metrics out of API shapes: metric names from trial summaries, values from reports.

import type { JsonObject, Trial } from "./api/types";
import { num } from "./format";

export interface MetricChoice {
  group: string;
  name: string;
}

// Determined's names for the two built-in groups inside a trial's summary_metrics.
const SUMMARY_GROUPS: Record<string, string> = { avg_metrics: "training", validation_metrics: "validation" };

/** Every numeric metric any of the trials reported, by group, validation first. */
export function metricChoices(trials: Trial[]): MetricChoice[] {
  const seen = new Map<string, MetricChoice>();
  for (const trial of trials) {
    for (const [key, section] of Object.entries(trial.summaryMetrics ?? {})) {
      if (!section || typeof section !== "object") continue;
      const group = SUMMARY_GROUPS[key] ?? key;
      for (const [name, summary] of Object.entries(section as JsonObject)) {
        const type = (summary as JsonObject | null)?.type;
        if (type !== undefined && type !== "number") continue;
        seen.set(`${group}\u0000${name}`, { group, name });
      }
    }
  }
  const order = (c: MetricChoice) => (c.group === "validation" ? 0 : c.group === "training" ? 1 : 2);
  return [...seen.values()].sort((a, b) => order(a) - order(b) || a.group.localeCompare(b.group) || a.name.localeCompare(b.name));
}

/** A report's aggregated metrics: Determined stores them under avg_metrics. */
export function reportMetrics(metrics: JsonObject | undefined): JsonObject {
  const avg = metrics?.avg_metrics ?? metrics?.avgMetrics;
  if (avg && typeof avg === "object") return avg as JsonObject;
  return metrics ?? {};
}

export function numericValue(value: unknown): number | null {
  if (typeof value === "number" || typeof value === "string") return num(value);
  return null;
}

/** Hyperparameters flattened to dotted names (nested hyperparameters are objects). */
export function flattenHparams(hparams: JsonObject | undefined, prefix = ""): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(hparams ?? {})) {
    const name = prefix ? `${prefix}.${key}` : key;
    if (value && typeof value === "object" && !Array.isArray(value)) Object.assign(out, flattenHparams(value as JsonObject, name));
    else out[name] = value;
  }
  return out;
}

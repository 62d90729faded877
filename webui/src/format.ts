// How values read from the API are shown: states, times, durations, sizes and metric values.

import type { Num } from "./api/types";

/** A double from the API as a number (null when absent or not finite). */
export function num(value: Num | null | undefined): number | null {
  if (typeof value === "number") return Number.isFinite(value) ? value : null;
  if (typeof value === "string" && value !== "" && !Number.isNaN(Number(value))) return Number(value);
  return null;
}

/** "STATE_STOPPING_CANCELED" → "Stopping canceled". */
export function stateLabel(state: string): string {
  const words = state.replace(/^STATE_/, "").toLowerCase().replace(/_/g, " ");
  return words.charAt(0).toUpperCase() + words.slice(1);
}

/** The colour family of a state: what the user should notice about it. */
export function stateKind(state: string): string {
  const s = state.replace(/^STATE_/, "");
  if (s === "COMPLETED") return "completed";
  if (s === "ERROR" || s === "DELETE_FAILED") return "error";
  if (s === "CANCELED" || s === "DELETED" || s === "TERMINATED") return "canceled";
  if (s === "PAUSED") return "paused";
  if (s.startsWith("STOPPING") || s === "DELETING" || s === "TERMINATING") return "stopping";
  if (s === "QUEUED" || s === "PULLING" || s === "STARTING" || s === "ASSIGNED") return "queued";
  if (s === "ACTIVE" || s === "RUNNING") return "running";
  return "unknown";
}

const TERMINAL = new Set(["COMPLETED", "CANCELED", "ERROR", "DELETED"]);

export function isTerminal(state: string): boolean {
  return TERMINAL.has(state.replace(/^STATE_/, ""));
}

export function formatTime(iso: string | undefined): string {
  if (!iso) return "–";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime()) || date.getTime() <= 0) return "–";
  return date.toLocaleString(undefined, {
    year: "numeric",
    month: "short",
    day: "2-digit",
    hour: "2-digit",
    minute: "2-digit",
    second: "2-digit",
  });
}

export function formatDuration(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms) || ms < 0) return "–";
  const seconds = Math.floor(ms / 1000);
  if (seconds < 60) return `${seconds}s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes}m ${seconds % 60}s`;
  const hours = Math.floor(minutes / 60);
  if (hours < 48) return `${hours}h ${minutes % 60}m`;
  return `${Math.floor(hours / 24)}d ${hours % 24}h`;
}

/** Between two RFC 3339 times, or from one until now. */
export function durationBetween(start?: string, end?: string): number | null {
  if (!start) return null;
  const from = new Date(start).getTime();
  const to = end ? new Date(end).getTime() : Date.now();
  if (!Number.isFinite(from) || !Number.isFinite(to) || from <= 0) return null;
  return to - from;
}

export function formatBytes(value: string | number | undefined): string {
  const bytes = Number(value ?? 0);
  if (!Number.isFinite(bytes) || bytes <= 0) return "–";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let size = bytes;
  let unit = 0;
  while (size >= 1024 && unit < units.length - 1) {
    size /= 1024;
    unit++;
  }
  return `${size.toFixed(unit === 0 ? 0 : 1)} ${units[unit]}`;
}

export function formatMetric(value: number | null | undefined): string {
  if (value === null || value === undefined || !Number.isFinite(value)) return "–";
  const abs = Math.abs(value);
  if (abs !== 0 && (abs >= 1e6 || abs < 1e-4)) return value.toExponential(3);
  return Number(value.toPrecision(5)).toString();
}

export function formatValue(value: unknown): string {
  if (value === null || value === undefined) return "–";
  if (typeof value === "number") return formatMetric(value);
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

/** Sum of a checkpoint's file sizes (int64 values arrive as strings). */
export function totalSize(resources: Record<string, string> | undefined): number {
  return Object.values(resources ?? {}).reduce((sum, size) => sum + Number(size || 0), 0);
}

/** Allocation ids are "<experiment>.<trial>.<run>". */
export function parseAllocationId(id: string): { experimentId: number; trialId: number; run: number } | null {
  const match = /^(\d+)\.(\d+)\.(\d+)$/.exec(id);
  if (!match) return null;
  return { experimentId: Number(match[1]), trialId: Number(match[2]), run: Number(match[3]) };
}

// Characters that change how the text around them is shown instead of showing a glyph: controls
// (ANSI escapes start with ESC; newlines, carriage returns), format characters (bidi overrides and
// isolates U+202A–U+202E, U+2066–U+2069, zero-width characters) and line/paragraph separators.
// The same set as the CLI's `printable` (clients/python/cairn/cli/output.py).
const UNPRINTABLE = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/gu;
const NAMED_ESCAPES: Record<string, string> = { "\n": "\\n", "\r": "\\r", "\t": "\\t" };

function escapeCode(char: string): string {
  const named = NAMED_ESCAPES[char];
  if (named) return named;
  const code = char.codePointAt(0) ?? 0;
  if (code < 0x100) return `\\x${code.toString(16).padStart(2, "0")}`;
  if (code < 0x10000) return `\\u${code.toString(16).padStart(4, "0")}`;
  return `\\U${code.toString(16).padStart(8, "0")}`;
}

/**
 * A name, description or label set by some user, with every character that could reorder, hide
 * or restyle what the page shows written out as its escape (\x1b, \u202e, \n), so that what is
 * shown is what is stored. A typed backslash stays as it is, as in the CLI. Every place that
 * shows such text goes through here; edit fields keep the stored text.
 */
export function printable(text: string | null | undefined, options: { keepNewlines?: boolean } = {}): string {
  if (!text) return "";
  if (options.keepNewlines) return text.split("\n").map((line) => printable(line)).join("\n");
  return text.replace(UNPRINTABLE, escapeCode);
}

/**
 * A time to come, relative to `now`: "in ~4 min", "in ~2 h"; "any moment now" once it has passed
 * (a forecast is refreshed by the master, not counted down past zero here). "–" when absent.
 */
export function formatUntil(iso: string | undefined, now: number = Date.now()): string {
  if (!iso) return "–";
  const at = new Date(iso).getTime();
  if (!Number.isFinite(at) || at <= 0) return "–";
  const seconds = Math.round((at - now) / 1000);
  if (seconds <= 5) return "any moment now";
  if (seconds < 60) return `in ~${seconds} s`;
  const minutes = Math.round(seconds / 60);
  if (minutes < 90) return `in ~${minutes} min`;
  const hours = Math.round(minutes / 60);
  if (hours < 48) return `in ~${hours} h`;
  return `in ~${Math.round(hours / 24)} d`;
}

/** "SCHEDULER_TYPE_FAIR_SHARE" → "fair share". */
export function schedulerLabel(type: string): string {
  return type.replace(/^SCHEDULER_TYPE_/, "").toLowerCase().replace(/_/g, " ");
}

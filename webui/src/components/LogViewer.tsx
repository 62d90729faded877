// A trial's logs, followed live: new lines are batched into one render per frame, the view sticks
// to the bottom until the user scrolls up (then a button resumes following), and only the last
// MAX_LINES lines stay in the DOM so a chatty trial cannot slow the page down. In a multi-process
// trial the lines launchers tagged with a rank show it, and a rank filter asks the master for one
// rank's lines only (Determined's rank_ids filter).

import { useEffect, useRef, useState } from "preact/hooks";
import { streamTrialLogs } from "../api/endpoints";
import type { TrialLogLine } from "../api/types";
import { useStream } from "../hooks";
import { ErrorNote } from "./ErrorNote";

export const MAX_LINES = 5000;

function timeOf(line: TrialLogLine): string {
  if (!line.timestamp) return "";
  const date = new Date(line.timestamp);
  return Number.isNaN(date.getTime()) ? "" : date.toLocaleTimeString(undefined, { hour12: false });
}

function rankOptions(seen: Set<number>, chosen: number | null): number[] {
  const ranks = new Set(seen);
  if (chosen !== null) ranks.add(chosen);
  return [...ranks].sort((a, b) => a - b);
}

export function LogViewer(props: { trialId: number }) {
  const lines = useRef<TrialLogLine[]>([]);
  const seenRanks = useRef<Set<number>>(new Set());
  const [rank, setRank] = useState<number | null>(null);
  const dropped = useRef(0);
  const [, setVersion] = useState(0);
  const [following, setFollowing] = useState(true);
  const box = useRef<HTMLDivElement>(null);
  const frame = useRef(0);

  const flush = () => {
    if (frame.current) return;
    frame.current = requestAnimationFrame(() => {
      frame.current = 0;
      if (lines.current.length > MAX_LINES) {
        dropped.current += lines.current.length - MAX_LINES;
        lines.current = lines.current.slice(-MAX_LINES);
      }
      setVersion((v) => v + 1);
    });
  };
  useEffect(() => () => cancelAnimationFrame(frame.current), []);

  const { error, ended } = useStream(
    (signal) => {
      // A reopened stream starts from the first line again.
      lines.current = [];
      dropped.current = 0;
      flush();
      return streamTrialLogs(
        props.trialId,
        true,
        (line) => {
          lines.current.push(line);
          if (line.rankId !== undefined && line.rankId !== null) seenRanks.current.add(line.rankId);
          flush();
        },
        signal,
        rank === null ? [] : [rank],
      );
    },
    { enabled: true, retryMs: 3000, reopenAfterEnd: false, keepWhenHidden: true },
    [props.trialId, rank],
  );
  const ranks = rankOptions(seenRanks.current, rank);

  useEffect(() => {
    if (following && box.current) box.current.scrollTop = box.current.scrollHeight;
  });

  const onScroll = () => {
    const el = box.current;
    if (!el) return;
    const atBottom = el.scrollHeight - el.scrollTop - el.clientHeight < 24;
    if (atBottom !== following) setFollowing(atBottom);
  };

  return (
    <div class="logs">
      <div class="logs-bar">
        <span class="muted" aria-live="polite">
          {lines.current.length} lines{dropped.current ? ` (the first ${dropped.current} not shown)` : ""}
          {ended ? " · trial finished" : " · following"}
        </span>
        {ranks.length > 0 ? (
          <label class="log-rank-filter">
            Rank{" "}
            <select
              aria-label="Show the lines of rank"
              value={rank === null ? "" : String(rank)}
              onChange={(event) => {
                const value = (event.target as HTMLSelectElement).value;
                setRank(value === "" ? null : Number(value));
              }}
            >
              <option value="">all</option>
              {ranks.map((r) => (
                <option key={r} value={String(r)}>
                  {r}
                </option>
              ))}
            </select>
          </label>
        ) : null}
        {!following ? (
          <button
            type="button"
            onClick={() => {
              setFollowing(true);
              if (box.current) box.current.scrollTop = box.current.scrollHeight;
            }}
          >
            Follow new lines
          </button>
        ) : null}
      </div>
      <ErrorNote error={error} what="logs" />
      <div ref={box} class="log-box" role="log" aria-label="Trial logs" tabIndex={0} onScroll={onScroll}>
        {lines.current.map((line) => (
          <div key={line.id} class={`log-line level-${(line.level || "").replace("LOG_LEVEL_", "").toLowerCase()}`}>
            <span class="log-time">{timeOf(line)}</span>
            {line.rankId !== undefined && line.rankId !== null ? (
              <span class="log-rank" title={`rank ${line.rankId}`}>
                [{line.rankId}]
              </span>
            ) : null}
            <span class="log-text">{line.message.replace(/\n$/, "")}</span>
          </div>
        ))}
      </div>
    </div>
  );
}

// A trial's logs, followed live: new lines are batched into one render per frame, the view sticks
// to the bottom until the user scrolls up (then a button resumes following), and only the last
// MAX_LINES lines stay in the DOM so a chatty trial cannot slow the page down.

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

export function LogViewer(props: { trialId: number }) {
  const lines = useRef<TrialLogLine[]>([]);
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
          flush();
        },
        signal,
      );
    },
    { enabled: true, retryMs: 3000, reopenAfterEnd: false, keepWhenHidden: true },
    [props.trialId],
  );

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
            <span class="log-text">{line.message.replace(/\n$/, "")}</span>
          </div>
        ))}
      </div>
    </div>
  );
}

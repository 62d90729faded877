import type { JSX } from "preact";
import type { Checkpoint } from "../api/types";
import { formatBytes, formatMetric, formatTime, num, totalSize } from "../format";
import { Link } from "./Link";
import { StateBadge } from "./StateBadge";

/** Table rows for checkpoints; shared by the experiment and trial pages. */
export function CheckpointRows(props: {
  checkpoints: Checkpoint[];
  loaded: boolean;
  showTrial?: boolean;
  // A last cell per row (e.g. a Register button), when given.
  action?: (checkpoint: Checkpoint) => JSX.Element | null;
}) {
  const showTrial = props.showTrial ?? true;
  if (props.loaded && props.checkpoints.length === 0) {
    return (
      <tr>
        <td colSpan={(showTrial ? 7 : 6) + (props.action ? 1 : 0)} class="empty">
          No checkpoints yet.
        </td>
      </tr>
    );
  }
  return (
    <>
      {props.checkpoints.map((c) => {
        const trialId = c.training?.trialId;
        return (
          <tr key={c.uuid}>
            <td>
              <code title={c.uuid}>{c.uuid.slice(0, 8)}</code>
            </td>
            {showTrial ? <td class="num">{trialId ? <Link href={`/trials/${trialId}`}>{trialId}</Link> : "–"}</td> : null}
            <td class="num">{String(c.metadata?.steps_completed ?? "–")}</td>
            <td>
              <StateBadge state={c.state} />
            </td>
            <td class="num">{formatBytes(totalSize(c.resources))}</td>
            <td class="num">{formatMetric(num(c.training?.searcherMetric))}</td>
            <td>{formatTime(c.reportTime)}</td>
            {props.action ? <td>{props.action(c)}</td> : null}
          </tr>
        );
      })}
    </>
  );
}

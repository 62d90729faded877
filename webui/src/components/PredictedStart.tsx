import { formatTime, formatUntil } from "../format";

/** A waiting job's forecast start: relative ("in ~4 min"), the absolute time on hover. */
export function PredictedStart(props: { at: string | undefined }) {
  if (!props.at) return <span class="muted">–</span>;
  return (
    <time dateTime={props.at} title={formatTime(props.at)} data-field="predicted-start">
      {formatUntil(props.at)}
    </time>
  );
}

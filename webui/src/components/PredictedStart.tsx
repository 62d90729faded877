import { formatTime, formatUntil } from "../format";

/** A waiting job's forecast start: relative ("in ~4 min"), the absolute time and when the forecast
 * was made on hover. */
export function PredictedStart(props: { at: string | undefined; madeAt?: string | undefined }) {
  if (!props.at) return <span class="muted">–</span>;
  const made = props.madeAt ? ` (forecast made ${formatTime(props.madeAt)})` : "";
  return (
    <time dateTime={props.at} title={`${formatTime(props.at)}${made}`} data-field="predicted-start">
      {formatUntil(props.at)}
    </time>
  );
}

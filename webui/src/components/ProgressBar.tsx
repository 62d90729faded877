export function ProgressBar(props: { value: number | null; label?: string }) {
  const percent = props.value === null ? 0 : Math.round(Math.max(0, Math.min(1, props.value)) * 100);
  return (
    <div
      class="progress"
      role="progressbar"
      aria-label={props.label ?? "Progress"}
      aria-valuemin={0}
      aria-valuemax={100}
      aria-valuenow={percent}
      title={`${percent}%`}
    >
      <div class="progress-fill" style={{ width: `${percent}%` }} />
      <span class="progress-text">{props.value === null ? "–" : `${percent}%`}</span>
    </div>
  );
}

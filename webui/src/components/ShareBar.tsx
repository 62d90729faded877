// Slots held against slots entitled, as one bar: the fill is what is held, the mark is the
// entitlement; a group over its entitlement (borrowing idle slots) shows its fill in another colour.

export function ShareBar(props: {
  held: number;
  entitled: number;
  label: string;
  /** What the mark stands for in the hover text: "entitled" (a share) or "allowed" (a maximum). */
  markWord?: string;
}) {
  const { held, entitled } = props;
  const text = `${held} held of ${entitled} ${props.markWord ?? "entitled"}`;
  const scale = Math.max(held, entitled, 1);
  const fill = Math.round((held / scale) * 100);
  const mark = Math.round((entitled / scale) * 100);
  const over = held > entitled;
  return (
    <div
      class={`share-bar${over ? " share-bar-over" : ""}`}
      role="meter"
      aria-label={props.label}
      aria-valuemin={0}
      aria-valuemax={scale}
      aria-valuenow={held}
      aria-valuetext={text}
      title={text}
    >
      <div class="share-bar-fill" style={{ width: `${fill}%` }} />
      <div class="share-bar-mark" style={{ left: `calc(${mark}% - 1px)` }} />
    </div>
  );
}

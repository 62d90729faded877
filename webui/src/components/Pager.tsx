export function Pager(props: {
  offset: number;
  limit: number;
  total: number;
  onChange: (offset: number) => void;
  label: string;
}) {
  const { offset, limit, total } = props;
  if (total <= limit && offset === 0) return null;
  const first = total === 0 ? 0 : offset + 1;
  const last = Math.min(total, offset + limit);
  return (
    <nav class="pager" aria-label={props.label}>
      <button type="button" disabled={offset <= 0} onClick={() => props.onChange(Math.max(0, offset - limit))}>
        ‹ Previous
      </button>
      <span>
        {first}–{last} of {total}
      </span>
      <button type="button" disabled={last >= total} onClick={() => props.onChange(offset + limit)}>
        Next ›
      </button>
    </nav>
  );
}

import { setQuery } from "../router";

/** The offset of a page's first row as the address keeps it (`offset=`); 0 when absent or bad. */
export function queryOffset(query: URLSearchParams): number {
  return Math.max(0, Number(query.get("offset") ?? 0) || 0);
}

/** Goes to the page whose first row is at `offset`, kept in the address. */
export function setQueryOffset(offset: number): void {
  setQuery({ offset: offset ? String(offset) : null });
}

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

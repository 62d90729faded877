import type { ComponentChildren } from "preact";

export interface Sort {
  key: string;
  desc: boolean;
}

/** A column header that sorts by its key; a second click reverses the order. */
export function SortHeader(props: {
  sortKey: string;
  sort: Sort;
  onSort: (sort: Sort) => void;
  children: ComponentChildren;
}) {
  const active = props.sort.key === props.sortKey;
  const ariaSort = active ? (props.sort.desc ? "descending" : "ascending") : "none";
  return (
    <th scope="col" aria-sort={ariaSort}>
      <button
        type="button"
        class="sort-button"
        onClick={() => props.onSort({ key: props.sortKey, desc: active ? !props.sort.desc : false })}
      >
        {props.children}
        <span class="sort-mark" aria-hidden="true">
          {active ? (props.sort.desc ? " ▼" : " ▲") : ""}
        </span>
      </button>
    </th>
  );
}

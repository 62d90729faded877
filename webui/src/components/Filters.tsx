// The filters of the list pages. Each is kept in the address, so a filtered view survives a reload
// and can be linked; changing one goes back to the first page.

import type { ComponentChildren } from "preact";
import { setQuery } from "../router";

export interface Choice {
  value: string;
  label: ComponentChildren;
}

/** Sets one filter in the address and goes back to the first page; "" or null removes it. */
export function setFilter(name: string, value: string | null): void {
  setQuery({ [name]: value, offset: null });
}

/** The choice whose value the address holds (`value`), else the first: the one that keeps all. */
export function chosen<T extends Choice>(choices: T[], value: string | null): T {
  return choices.find((c) => c.value === (value ?? "")) ?? choices[0];
}

/** A labelled drop-down of one filter. */
export function FilterSelect(props: {
  label: string;
  name?: string;
  value: string;
  choices: Choice[];
  onChange: (value: string) => void;
}) {
  return (
    <label>
      {props.label}{" "}
      <select
        name={props.name}
        value={props.value}
        onChange={(e) => props.onChange((e.target as HTMLSelectElement).value)}
      >
        {props.choices.map((c) => (
          <option key={c.value} value={c.value}>
            {c.label}
          </option>
        ))}
      </select>
    </label>
  );
}

/** Whether the address asks for archived records too (`archived=1`, set by ArchivedToggle). */
export function showsArchived(query: URLSearchParams): boolean {
  return query.get("archived") === "1";
}

/** "Show archived": when ticked (`archived=1`) the archived records are listed with the others. */
export function ArchivedToggle(props: { archived: boolean }) {
  return (
    <label class="checkbox">
      <input
        type="checkbox"
        checked={props.archived}
        onChange={(e) => setFilter("archived", (e.target as HTMLInputElement).checked ? "1" : null)}
      />{" "}
      Show archived
    </label>
  );
}

import type { ComponentChildren, VNode } from "preact";

/**
 * A page's table of records: its column headers, its rows, and, when `empty` is given, one row
 * across every column saying why there are none. A column is its header's text (a plain header
 * cell) or a header cell of its own (a SortHeader). The table is named by the page's heading
 * (`describedBy`, its id) or, where no heading names it, by a caption only screen readers show.
 */
export function DataTable(props: {
  columns: (string | VNode)[];
  describedBy?: string;
  caption?: ComponentChildren;
  // Shown when not null: the page decides, since only it knows whether its data has loaded.
  empty?: ComponentChildren;
  children: ComponentChildren;
}) {
  const { columns, empty } = props;
  return (
    <div class="table-wrap">
      <table class="table" aria-describedby={props.describedBy}>
        {props.caption === undefined ? null : <caption class="visually-hidden">{props.caption}</caption>}
        <thead>
          <tr>
            {columns.map((column) =>
              typeof column === "string" ? (
                <th key={column} scope="col">
                  {column}
                </th>
              ) : (
                column
              ),
            )}
          </tr>
        </thead>
        <tbody>
          {props.children}
          {empty === undefined || empty === null ? null : (
            <tr>
              <td colSpan={columns.length} class="empty">
                {empty}
              </td>
            </tr>
          )}
        </tbody>
      </table>
    </div>
  );
}

// How a fair-share pool is divided at the scheduler's last pass: one row per workspace (its name
// links to the workspace's weights and quotas), each expandable to its users' rows, with the slots
// nominal (by weight alone), entitled (given what each wants), held, wanted, borrowed and lent.

import { useState } from "preact/hooks";
import type { FairShare, GetResourcePoolSharesResponse } from "../api/types";
import { formatTime, printable } from "../format";
import { Link } from "./Link";
import { ShareBar } from "./ShareBar";

function SlotCells(props: { share: FairShare }) {
  const s = props.share;
  return (
    <>
      <td class="num" data-field="nominal">{s.nominalSlots}</td>
      <td class="num" data-field="entitled">{s.entitledSlots}</td>
      <td class="num" data-field="held">{s.heldSlots}</td>
      <td class="num" data-field="wanted">{s.wantedSlots}</td>
      <td class="num" data-field="borrowed">{s.borrowedSlots}</td>
      <td class="num" data-field="lent">{s.lentSlots}</td>
      <td>
        <ShareBar held={s.heldSlots} entitled={s.entitledSlots} label={`${printable(s.name)}: held against entitled`} />
      </td>
    </>
  );
}

/** A user's key is "<workspace id>/<user id>": the users of one workspace. */
function usersOf(workspace: FairShare, users: FairShare[]): FairShare[] {
  return users.filter((u) => u.key.split("/")[0] === workspace.key);
}

function WorkspaceRows(props: { pool: string; workspace: FairShare; users: FairShare[] }) {
  const { workspace, users } = props;
  const [open, setOpen] = useState(false);
  const id = Number(workspace.key);
  return (
    <>
      <tr data-share-workspace={workspace.name}>
        <th scope="row">
          <button
            type="button"
            class="disclosure"
            aria-expanded={open}
            aria-label={`${open ? "Hide" : "Show"} the users of ${printable(workspace.name)}`}
            disabled={users.length === 0}
            onClick={() => setOpen(!open)}
          >
            {open ? "▾" : "▸"}
          </button>{" "}
          {Number.isInteger(id) && id > 0 ? (
            <Link href={`/workspaces/${id}`} title="Weights and quotas of this workspace">
              {printable(workspace.name)}
            </Link>
          ) : (
            printable(workspace.name)
          )}
        </th>
        <SlotCells share={workspace} />
      </tr>
      {open
        ? users.map((u) => (
            <tr key={u.key} class="share-user" data-share-user={u.name}>
              <th scope="row" class="indent">
                {printable(u.name)}
              </th>
              <SlotCells share={u} />
            </tr>
          ))
        : null}
    </>
  );
}

export function FairShareTable(props: { pool: string; shares: GetResourcePoolSharesResponse }) {
  const { pool, shares } = props;
  const workspaces = shares.workspaces ?? [];
  const users = shares.users ?? [];
  return (
    <div class="fair-shares" data-shares-pool={pool}>
      <h4>
        Shares <span class="muted">{shares.dividedAt ? `as divided at ${formatTime(shares.dividedAt)}` : ""}</span>
      </h4>
      {workspaces.length === 0 ? (
        <p class="empty">No workspace has wanted slots in this pool since the master started.</p>
      ) : (
        <div class="table-wrap">
          <table class="table" data-table="shares">
            <caption class="visually-hidden">Shares of pool {printable(pool)} per workspace and user</caption>
            <thead>
              <tr>
                <th scope="col">Workspace / user</th>
                <th scope="col" title="By weight alone, were every group to want the whole pool">
                  Nominal
                </th>
                <th scope="col" title="What its share gives it now, given what each group wants">
                  Entitled
                </th>
                <th scope="col">Held</th>
                <th scope="col">Wanted</th>
                <th scope="col" title="Held beyond its nominal share">
                  Borrowed
                </th>
                <th scope="col" title="Of its nominal share, what it does not want">
                  Lent
                </th>
                <th scope="col">Held / entitled</th>
              </tr>
            </thead>
            <tbody>
              {workspaces.map((w) => (
                <WorkspaceRows key={w.key} pool={pool} workspace={w} users={usersOf(w, users)} />
              ))}
            </tbody>
          </table>
        </div>
      )}
    </div>
  );
}

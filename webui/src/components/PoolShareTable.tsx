// A workspace's guaranteed and maximum slots (and weight, in a fair-share pool) and slots in use in
// every pool, then its users' own; each row editable and clearable (the master lets only an admin change them,
// and says so to anyone else), and, given the users to choose from, a user's quota added per pool.

import { useState } from "preact/hooks";
import { clearWorkspacePoolShare } from "../api/endpoints";
import type { PoolShare, UserSummary } from "../api/types";
import { formatMetric, num, printable } from "../format";
import { PoolShareForm } from "./PoolShareForm";
import { ShareBar } from "./ShareBar";

const COLUMNS = 7;

function rowKey(share: PoolShare): string {
  return `${share.resourcePool}/${share.userId}`;
}

function whoOf(share: PoolShare): string {
  return share.userId === 0 ? "Workspace" : printable(share.username) || `user ${share.userId}`;
}

/** Whether anything is set for the row (a workspace's row shows weight 1 and no quota when not). */
function isSet(share: PoolShare): boolean {
  return share.userId !== 0 || share.maxSlots > 0 || share.guaranteedSlots > 0 || num(share.weight) !== 1;
}

function ShareRow(props: { share: PoolShare; onEdit: () => void; onClear: () => void }) {
  const s = props.share;
  const who = whoOf(s);
  const pool = printable(s.resourcePool);
  return (
    <tr data-share-pool={s.resourcePool} data-share-who={s.userId === 0 ? "workspace" : s.username}>
      <td>{pool}</td>
      <td>{who}</td>
      <td class="num" data-field="weight" title={s.fairShare ? undefined : "a priority pool divides by no weight"}>
        {s.fairShare ? formatMetric(num(s.weight)) : "–"}
      </td>
      <td class="num" data-field="guaranteed">
        {s.guaranteedSlots}
      </td>
      <td class="num" data-field="max">
        {s.maxSlots > 0 ? s.maxSlots : "no cap"}
      </td>
      <td class="num" data-field="in-use">
        {s.slotsInUse}
        {s.maxSlots > 0 ? (
          <ShareBar
            held={s.slotsInUse}
            entitled={s.maxSlots}
            markWord="allowed"
            label={`${who}: in use against its maximum`}
          />
        ) : null}
      </td>
      <td class="actions">
        <button type="button" onClick={props.onEdit} aria-label={`Edit ${who} in ${pool}`}>
          Edit
        </button>
        {isSet(s) ? (
          <button type="button" class="danger" onClick={props.onClear} aria-label={`Clear ${who} in ${pool}`}>
            Clear
          </button>
        ) : null}
      </td>
    </tr>
  );
}

export function PoolShareTable(props: {
  workspaceId: number;
  shares: PoolShare[];
  users: UserSummary[];
  onChanged: () => void;
}) {
  const [editing, setEditing] = useState<PoolShare | null>(null);
  const [error, setError] = useState("");
  const pools = [...new Set(props.shares.map((s) => s.resourcePool))];

  const clear = async (share: PoolShare) => {
    setError("");
    try {
      await clearWorkspacePoolShare(props.workspaceId, share.resourcePool, share.userId);
      props.onChanged();
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e));
    }
  };

  const formRow = (share: PoolShare) => (
    <tr key={`${rowKey(share)}/form`} class="share-form-row">
      <td colSpan={COLUMNS}>
        <PoolShareForm
          workspaceId={props.workspaceId}
          share={share}
          users={props.users}
          onSaved={() => {
            setEditing(null);
            props.onChanged();
          }}
          onCancel={() => setEditing(null)}
        />
      </td>
    </tr>
  );

  const rowsOfPool = (pool: string) => {
    const rows = [];
    for (const share of props.shares.filter((s) => s.resourcePool === pool)) {
      rows.push(<ShareRow key={rowKey(share)} share={share} onEdit={() => setEditing(share)} onClear={() => clear(share)} />);
      if (editing && rowKey(editing) === rowKey(share)) rows.push(formRow(share));
    }
    if (props.users.length > 0) {
      // A new user's row: the form asks which user (userId -1 until chosen).
      const newUser: PoolShare = {
        resourcePool: pool,
        userId: -1,
        username: "",
        weight: 1,
        guaranteedSlots: 0,
        maxSlots: 0,
        slotsInUse: 0,
        fairShare: props.shares.some((s) => s.resourcePool === pool && s.fairShare),
      };
      rows.push(
        <tr key={`${pool}/add`} class="share-add">
          <td />
          <td colSpan={COLUMNS - 1}>
            <button type="button" onClick={() => setEditing(newUser)}>
              Set a user's quota in {printable(pool)}
            </button>
          </td>
        </tr>,
      );
      if (editing && editing.userId < 0 && editing.resourcePool === pool) rows.push(formRow(editing));
    }
    return rows;
  };

  return (
    <>
      {error ? (
        <p class="error-note" role="alert">
          {error}
        </p>
      ) : null}
      <div class="table-wrap">
        <table class="table" data-table="pool-shares">
          <caption class="visually-hidden">Quotas and weights per resource pool</caption>
          <thead>
            <tr>
              <th scope="col">Pool</th>
              <th scope="col">Who</th>
              <th scope="col">Weight</th>
              <th scope="col">Guaranteed</th>
              <th scope="col">Max</th>
              <th scope="col">In use</th>
              <th scope="col">
                <span class="visually-hidden">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>{pools.flatMap(rowsOfPool)}</tbody>
        </table>
        {pools.length === 0 ? <p class="empty">No resource pool.</p> : null}
      </div>
    </>
  );
}

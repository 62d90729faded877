// A workspace's weight, guaranteed and maximum slots and slots in use in every fair-share pool,
// then its users' own; each row editable and clearable (the master lets only an admin change them,
// and says so to anyone else), and a user's quota added per pool.

import { useState } from "preact/hooks";
import { clearWorkspacePoolShare } from "../api/endpoints";
import type { PoolShare, UserSummary } from "../api/types";
import { formatMetric, num, printable } from "../format";
import { PoolShareForm } from "./PoolShareForm";
import { ShareBar } from "./ShareBar";

function rowKey(share: PoolShare): string {
  return `${share.resourcePool}/${share.userId}`;
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

  const form = (share: PoolShare) => (
    <tr class="share-form-row">
      <td colSpan={7}>
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

  return (
    <>
      {error ? (
        <p class="error-note" role="alert">
          {error}
        </p>
      ) : null}
      <div class="table-wrap">
        <table class="table" data-table="pool-shares">
          <caption class="visually-hidden">Weights and quotas per fair-share pool</caption>
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
          <tbody>
            {pools.map((pool) => {
              const rows = props.shares.filter((s) => s.resourcePool === pool);
              const newUser: PoolShare = {
                resourcePool: pool,
                userId: -1,
                username: "",
                weight: 1,
                guaranteedSlots: 0,
                maxSlots: 0,
                slotsInUse: 0,
              };
              return [
                ...rows.map((s) => {
                  const who = s.userId === 0 ? "Workspace" : printable(s.username) || `user ${s.userId}`;
                  const cap = s.maxSlots > 0 ? s.maxSlots : Math.max(s.guaranteedSlots, s.slotsInUse);
                  return [
                    <tr key={rowKey(s)} data-share-pool={pool} data-share-who={s.userId === 0 ? "workspace" : s.username}>
                      <td>{printable(pool)}</td>
                      <td>{who}</td>
                      <td class="num" data-field="weight">
                        {formatMetric(num(s.weight))}
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
                          <ShareBar held={s.slotsInUse} entitled={cap} label={`${who}: in use against its maximum`} />
                        ) : null}
                      </td>
                      <td class="actions">
                        <button type="button" onClick={() => setEditing(s)} aria-label={`Edit ${who} in ${printable(pool)}`}>
                          Edit
                        </button>
                        {s.userId !== 0 || s.maxSlots > 0 || s.guaranteedSlots > 0 || num(s.weight) !== 1 ? (
                          <button type="button" class="danger" onClick={() => clear(s)} aria-label={`Clear ${who} in ${printable(pool)}`}>
                            Clear
                          </button>
                        ) : null}
                      </td>
                    </tr>,
                    editing && rowKey(editing) === rowKey(s) ? form(s) : null,
                  ];
                }),
                <tr key={`${pool}/add`} class="share-add">
                  <td />
                  <td colSpan={6}>
                    <button type="button" onClick={() => setEditing(newUser)}>
                      Set a user's quota in {printable(pool)}
                    </button>
                  </td>
                </tr>,
                editing && editing.userId < 0 && editing.resourcePool === pool ? form(editing) : null,
              ];
            })}
          </tbody>
        </table>
        {pools.length === 0 ? <p class="empty">No resource pool schedules by fair share.</p> : null}
      </div>
    </>
  );
}

// The form that sets a workspace's (or one of its users') quota in one pool, and its weight where the
// pool divides by weight (fair share; a priority pool keeps weight 1).
// The master is the judge of every value: what it refuses is shown as it words it (the field
// named), and nothing is changed; only a non-number is caught here, naming its field the same way.

import { useState } from "preact/hooks";
import { setWorkspacePoolShare } from "../api/endpoints";
import type { PoolShare, UserSummary } from "../api/types";
import { num, printable } from "../format";

function parsed(field: string, text: string, integer: boolean): number {
  const value = Number(text.trim());
  if (text.trim() === "" || !Number.isFinite(value) || (integer && !Number.isInteger(value))) {
    throw new Error(`${field}: ${integer ? "a whole number" : "a number"} (got ${JSON.stringify(text)})`);
  }
  return value;
}

export function PoolShareForm(props: {
  workspaceId: number;
  /** The setting being edited; a new one for a user when `share.userId` is -1 (chosen here). */
  share: PoolShare;
  users: UserSummary[];
  onSaved: () => void;
  onCancel: () => void;
}) {
  const { share } = props;
  const choosingUser = share.userId < 0;
  const [userId, setUserId] = useState(choosingUser ? "" : String(share.userId));
  const [weight, setWeight] = useState(String(num(share.weight) ?? 1));
  const [guaranteed, setGuaranteed] = useState(String(share.guaranteedSlots));
  const [max, setMax] = useState(String(share.maxSlots));
  const [error, setError] = useState("");
  const [busy, setBusy] = useState(false);

  const save = async (event: Event) => {
    event.preventDefault();
    setError("");
    let setting;
    try {
      setting = {
        userId: choosingUser ? parsed("userId", userId, true) : share.userId,
        weight: share.fairShare ? parsed("weight", weight, false) : 1,
        guaranteedSlots: parsed("guaranteedSlots", guaranteed, true),
        maxSlots: parsed("maxSlots", max, true),
      };
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e));
      return;
    }
    setBusy(true);
    try {
      await setWorkspacePoolShare(props.workspaceId, share.resourcePool, setting);
      props.onSaved();
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e));
    } finally {
      setBusy(false);
    }
  };

  const who = share.userId === 0 ? "the workspace" : choosingUser ? "a user" : `user ${printable(share.username)}`;
  return (
    <form class="share-form" onSubmit={save} aria-label={`Weight and quota of ${who} in pool ${printable(share.resourcePool)}`}>
      {choosingUser ? (
        <label>
          User{" "}
          <select value={userId} onChange={(e) => setUserId((e.target as HTMLSelectElement).value)} required>
            <option value="">Choose…</option>
            {props.users.map((u) => (
              <option key={u.id} value={String(u.id)}>
                {printable(u.username)}
              </option>
            ))}
          </select>
        </label>
      ) : null}
      {share.fairShare ? (
        <label>
          Weight{" "}
          <input type="text" inputMode="decimal" size={6} value={weight} onInput={(e) => setWeight((e.target as HTMLInputElement).value)} />
        </label>
      ) : null}
      <label>
        Guaranteed slots{" "}
        <input
          type="text"
          inputMode="numeric"
          size={5}
          value={guaranteed}
          onInput={(e) => setGuaranteed((e.target as HTMLInputElement).value)}
        />
      </label>
      <label>
        Max slots{" "}
        <input type="text" inputMode="numeric" size={5} value={max} onInput={(e) => setMax((e.target as HTMLInputElement).value)} />
      </label>
      <span class="hint">max 0: no cap</span>
      <button type="submit" class="primary" disabled={busy}>
        Save
      </button>
      <button type="button" disabled={busy} onClick={props.onCancel}>
        Cancel
      </button>
      {error ? (
        <p class="error-note" role="alert" data-field="share-error">
          {error}
        </p>
      ) : null}
    </form>
  );
}

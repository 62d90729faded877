// A workspace as the teams sharing the cluster see it: in each pool, its guaranteed and maximum
// slots (and weight, in a fair-share pool) and the slots it uses now, for the workspace and its users; the
// pools it may use (a bound pool takes work only from its workspaces). Reached from the cluster
// page's shares and bindings.

import { getUsers, getWorkspace, getWorkspacePoolShares, getWorkspacePools } from "../api/endpoints";
import { ErrorNote } from "../components/ErrorNote";
import { Link } from "../components/Link";
import { PoolShareTable } from "../components/PoolShareTable";
import { printable } from "../format";
import { usePoll } from "../hooks";

export function WorkspacePage(props: { id: number; admin: boolean }) {
  const { id } = props;
  const workspace = usePoll((signal) => getWorkspace(id, signal), 0, [id]);
  const shares = usePoll((signal) => getWorkspacePoolShares(id, signal), 5000, [id]);
  const pools = usePoll((signal) => getWorkspacePools(id, signal), 0, [id]);
  // Only an admin may list users (to add one's quota); anyone else edits the rows shown.
  const users = usePoll((signal) => (props.admin ? getUsers(signal) : Promise.resolve({ users: [] })), 0, [props.admin]);
  const name = workspace.data ? printable(workspace.data.workspace.name) : `Workspace ${id}`;
  return (
    <section aria-labelledby="workspace-title">
      <div class="crumbs">
        <Link href="/cluster">Cluster</Link> › Workspace {id}
      </div>
      <div class="page-head">
        <h1 id="workspace-title">{name}</h1>
      </div>
      <ErrorNote error={workspace.error} what="the workspace" />
      <p data-field="available-pools">
        Resource pools it may use: {(pools.data?.resourcePools ?? []).map((p) => printable(p)).join(", ") || "–"}
      </p>
      <h2>Weights and quotas</h2>
      <p class="hint">
        In every pool, guaranteed slots go to its work first and are taken back for it from work over its own
        guarantee while it wants them, and it never holds more than its maximum. A weight divides a fair-share pool
        among its workspaces (and a workspace's share among its users).
        {props.admin ? "" : " Only an admin can change them."}
      </p>
      <ErrorNote error={shares.error} what="weights and quotas" />
      {shares.data ? (
        <PoolShareTable
          workspaceId={id}
          shares={shares.data.shares ?? []}
          users={users.data?.users ?? []}
          onChanged={shares.refresh}
        />
      ) : null}
    </section>
  );
}

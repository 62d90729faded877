// The model registry: every registered model with its newest activity, and a way to create one.
// Versions are registered from an experiment's checkpoints (the Checkpoints tab) or `det model
// register-version`.

import { useState } from "preact/hooks";
import { createModel, getModels } from "../api/endpoints";
import type { Model } from "../api/types";
import { DataTable } from "../components/DataTable";
import { ErrorNote } from "../components/ErrorNote";
import { ArchivedToggle, showsArchived } from "../components/Filters";
import { Link } from "../components/Link";
import { Pager, queryOffset, setQueryOffset } from "../components/Pager";
import { TextDialog } from "../components/TextDialog";
import { formatTime, printable } from "../format";
import { usePoll } from "../hooks";
import { navigate, useLocation } from "../router";

const PAGE_SIZE = 25;

export function ModelsPage() {
  const { query } = useLocation();
  const offset = queryOffset(query);
  const archived = showsArchived(query);
  const [creating, setCreating] = useState(false);
  const { data, error } = usePoll(
    (signal) =>
      getModels(
        {
          sortBy: "SORT_BY_LAST_UPDATED_TIME",
          orderBy: "ORDER_BY_DESC",
          offset,
          limit: PAGE_SIZE,
          archived: archived ? undefined : false,
        },
        signal,
      ),
    10000,
    [offset, archived],
  );
  const models = data?.models ?? [];

  return (
    <section aria-labelledby="models-title">
      <div class="page-head">
        <h1 id="models-title">Model registry</h1>
        <div class="filters">
          <ArchivedToggle archived={archived} />
          <button type="button" class="primary" onClick={() => setCreating(true)}>
            New model
          </button>
        </div>
      </div>
      <ErrorNote error={error} what="models" />
      <DataTable
        columns={["Name", "Description", "Versions", "Labels", "User", "Last updated"]}
        describedBy="models-title"
        empty={
          data && models.length === 0 ? (
            <>
              No models yet. Create one here or with <code>det model create NAME</code>.
            </>
          ) : null
        }
      >
        {models.map((m) => (
          <ModelRow key={m.id} model={m} />
        ))}
      </DataTable>
      <Pager
        label="Model pages"
        offset={offset}
        limit={PAGE_SIZE}
        total={data?.pagination?.total ?? models.length}
        onChange={setQueryOffset}
      />
      <TextDialog
        open={creating}
        title="New model"
        label="Name"
        initial=""
        submitLabel="Create"
        onClose={() => setCreating(false)}
        onSubmit={async (name) => {
          const created = await createModel(name.trim(), "");
          setCreating(false);
          navigate(`/models/${encodeURIComponent(created.model.name)}`);
        }}
      />
    </section>
  );
}

function ModelRow(props: { model: Model }) {
  const m = props.model;
  const href = `/models/${encodeURIComponent(m.name)}`;
  return (
    <tr data-model-name={m.name}>
      <td>
        <Link href={href}>{printable(m.name)}</Link>
        {m.archived ? <span class="tag">archived</span> : null}
      </td>
      <td>{printable(m.description) || <span class="muted">–</span>}</td>
      <td class="num">{m.numVersions}</td>
      <td>
        {(m.labels ?? []).map((label) => (
          <span key={label} class="tag">
            {printable(label)}
          </span>
        ))}
      </td>
      <td>{printable(m.username)}</td>
      <td>{formatTime(m.lastUpdatedTime)}</td>
    </tr>
  );
}

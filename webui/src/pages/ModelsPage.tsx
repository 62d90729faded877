// The model registry: every registered model with its newest activity, and a way to create one.
// Versions are registered from an experiment's checkpoints (the Checkpoints tab) or `det model
// register-version`.

import { useState } from "preact/hooks";
import { createModel, getModels } from "../api/endpoints";
import type { Model } from "../api/types";
import { ErrorNote } from "../components/ErrorNote";
import { Link } from "../components/Link";
import { Pager } from "../components/Pager";
import { TextDialog } from "../components/TextDialog";
import { formatTime, printable } from "../format";
import { usePoll } from "../hooks";
import { navigate, setQuery, useLocation } from "../router";

const PAGE_SIZE = 25;

export function ModelsPage() {
  const { query } = useLocation();
  const offset = Math.max(0, Number(query.get("offset") ?? 0) || 0);
  const archived = query.get("archived") === "1";
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
          <label class="checkbox">
            <input
              type="checkbox"
              checked={archived}
              onChange={(e) => setQuery({ archived: (e.target as HTMLInputElement).checked ? "1" : null, offset: null })}
            />{" "}
            Show archived
          </label>
          <button type="button" class="primary" onClick={() => setCreating(true)}>
            New model
          </button>
        </div>
      </div>
      <ErrorNote error={error} what="models" />
      <div class="table-wrap">
        <table class="table" aria-describedby="models-title">
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Description</th>
              <th scope="col">Versions</th>
              <th scope="col">Labels</th>
              <th scope="col">User</th>
              <th scope="col">Last updated</th>
            </tr>
          </thead>
          <tbody>
            {models.map((m) => (
              <ModelRow key={m.id} model={m} />
            ))}
            {data && models.length === 0 ? (
              <tr>
                <td colSpan={6} class="empty">
                  No models yet. Create one here or with <code>det model create NAME</code>.
                </td>
              </tr>
            ) : null}
          </tbody>
        </table>
      </div>
      <Pager
        label="Model pages"
        offset={offset}
        limit={PAGE_SIZE}
        total={data?.pagination?.total ?? models.length}
        onChange={(next) => setQuery({ offset: next ? String(next) : null })}
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

// One registered model: what it is, and its versions, each a checkpoint of some trial.

import { getModelVersions } from "../api/endpoints";
import { DataTable } from "../components/DataTable";
import { ErrorNote } from "../components/ErrorNote";
import { Link } from "../components/Link";
import { formatBytes, formatTime, printable, totalSize } from "../format";
import { usePoll } from "../hooks";

export function ModelPage(props: { name: string }) {
  const { data, error } = usePoll((signal) => getModelVersions(props.name, signal), 10000, [props.name]);
  const model = data?.model;
  const versions = data?.modelVersions ?? [];
  return (
    <section aria-labelledby="model-title">
      <nav class="crumbs" aria-label="Breadcrumb">
        <Link href="/models">Model registry</Link> › {printable(props.name)}
      </nav>
      <div class="page-head">
        <h1 id="model-title">{printable(props.name)}</h1>
        {model?.archived ? <span class="tag">archived</span> : null}
      </div>
      <ErrorNote error={error} what={`model ${printable(props.name)}`} />
      {model ? (
        <dl class="facts">
          <div>
            <dt>Description</dt>
            <dd>{printable(model.description) || "–"}</dd>
          </div>
          <div>
            <dt>Versions</dt>
            <dd>{model.numVersions}</dd>
          </div>
          <div>
            <dt>User</dt>
            <dd>{printable(model.username)}</dd>
          </div>
          <div>
            <dt>Created</dt>
            <dd>{formatTime(model.creationTime)}</dd>
          </div>
        </dl>
      ) : null}
      <DataTable
        columns={["Version", "Name", "Checkpoint", "Trial", "Batches", "Size", "Registered"]}
        caption={<>Versions of model {printable(props.name)}</>}
        empty={
          data && versions.length === 0 ? "No versions yet: register a checkpoint from an experiment's Checkpoints tab." : null
        }
      >
        {versions.map((v) => {
          const trialId = v.checkpoint.training?.trialId;
          return (
            <tr key={v.id} data-version={v.version}>
              <td class="num">{v.version}</td>
              <td>{printable(v.name) || <span class="muted">–</span>}</td>
              <td>
                <code title={v.checkpoint.uuid}>{v.checkpoint.uuid.slice(0, 8)}</code>
              </td>
              <td class="num">{trialId ? <Link href={`/trials/${trialId}`}>{trialId}</Link> : "–"}</td>
              <td class="num">{String(v.checkpoint.metadata?.steps_completed ?? "–")}</td>
              <td class="num">{formatBytes(totalSize(v.checkpoint.resources))}</td>
              <td>{formatTime(v.creationTime)}</td>
            </tr>
          );
        })}
      </DataTable>
    </section>
  );
}

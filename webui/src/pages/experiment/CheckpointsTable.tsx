// The experiment's checkpoints, sorted and paged by the master (GetExperimentCheckpoints).

import { useState } from "preact/hooks";
import { getExperimentCheckpoints } from "../../api/endpoints";
import type { Experiment } from "../../api/types";
import { CheckpointRows } from "../../components/CheckpointRows";
import { RegisterCheckpointDialog } from "../../components/RegisterCheckpointDialog";
import { ErrorNote } from "../../components/ErrorNote";
import { Pager } from "../../components/Pager";
import { type Sort, SortHeader } from "../../components/SortHeader";
import { isTerminal } from "../../format";
import { usePoll } from "../../hooks";

const PAGE_SIZE = 25;
const SORT_BY: Record<string, string> = {
  uuid: "SORT_BY_UUID",
  trial: "SORT_BY_TRIAL_ID",
  steps: "SORT_BY_BATCH_NUMBER",
  time: "SORT_BY_END_TIME",
  state: "SORT_BY_STATE",
  metric: "SORT_BY_SEARCHER_METRIC",
};

export function CheckpointsTable(props: { experiment: Experiment }) {
  const [sort, setSort] = useState<Sort>({ key: "time", desc: true });
  const [offset, setOffset] = useState(0);
  const [registering, setRegistering] = useState<string | null>(null);
  const { data, error } = usePoll(
    (signal) =>
      getExperimentCheckpoints(
        props.experiment.id,
        {
          sortByAttr: SORT_BY[sort.key],
          orderBy: sort.desc ? "ORDER_BY_DESC" : "ORDER_BY_ASC",
          offset,
          limit: PAGE_SIZE,
        },
        signal,
      ),
    isTerminal(props.experiment.state) ? 30000 : 8000,
    [props.experiment.id, sort.key, sort.desc, offset],
  );
  const checkpoints = data?.checkpoints ?? [];
  const header = (key: string, label: string) => (
    <SortHeader sortKey={key} sort={sort} onSort={(s) => (setSort(s), setOffset(0))}>
      {label}
    </SortHeader>
  );
  return (
    <div>
      <ErrorNote error={error} what="checkpoints" />
      <div class="table-wrap">
        <table class="table">
          <caption class="visually-hidden">Checkpoints of experiment {props.experiment.id}</caption>
          <thead>
            <tr>
              {header("uuid", "UUID")}
              {header("trial", "Trial")}
              {header("steps", "Batches")}
              {header("state", "State")}
              <th scope="col">Size</th>
              {header("metric", `Searcher metric (${props.experiment.searcherMetric})`)}
              {header("time", "Reported")}
              <th scope="col">
                <span class="visually-hidden">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            <CheckpointRows
              checkpoints={checkpoints}
              loaded={data !== undefined}
              action={(c) =>
                c.state === "STATE_COMPLETED" || c.state === "COMPLETED" ? (
                  <button type="button" class="link-button" onClick={() => setRegistering(c.uuid)}>
                    Register
                  </button>
                ) : null
              }
            />
          </tbody>
        </table>
      </div>
      <RegisterCheckpointDialog uuid={registering} onClose={() => setRegistering(null)} />
      <Pager
        label="Checkpoint pages"
        offset={offset}
        limit={PAGE_SIZE}
        total={data?.pagination?.total ?? checkpoints.length}
        onChange={setOffset}
      />
    </div>
  );
}

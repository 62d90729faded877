// Every trial of the experiment, sorted and paged here (the list is already loaded for the charts).

import { useMemo, useState } from "preact/hooks";
import type { Experiment, Trial } from "../../api/types";
import { DataTable } from "../../components/DataTable";
import { ErrorNote } from "../../components/ErrorNote";
import { Link } from "../../components/Link";
import { Pager } from "../../components/Pager";
import { type Sort, SortHeader } from "../../components/SortHeader";
import { StateBadge } from "../../components/StateBadge";
import { durationBetween, formatBytes, formatDuration, formatMetric, formatValue, num } from "../../format";
import { flattenHparams } from "../../metrics";

const PAGE_SIZE = 50;

type Getter = (t: Trial) => number | string | null;

const COLUMNS: { key: string; label: string; get: Getter }[] = [
  { key: "id", label: "ID", get: (t) => t.id },
  { key: "state", label: "State", get: (t) => t.state },
  { key: "restarts", label: "Restarts", get: (t) => t.restarts },
  { key: "steps", label: "Batches", get: (t) => t.totalBatchesProcessed },
  { key: "metric", label: "Best metric", get: (t) => num(t.searcherMetricValue) },
  { key: "checkpoints", label: "Checkpoints", get: (t) => t.checkpointCount },
  { key: "duration", label: "Duration", get: (t) => durationBetween(t.startTime, t.endTime) },
];

export function TrialsTable(props: { experiment: Experiment; trials: Trial[]; error: Error | undefined }) {
  const [sort, setSort] = useState<Sort>({ key: "id", desc: false });
  const [offset, setOffset] = useState(0);
  const sorted = useMemo(() => {
    const column = COLUMNS.find((c) => c.key === sort.key) ?? COLUMNS[0];
    const direction = sort.desc ? -1 : 1;
    return [...props.trials].sort((a, b) => {
      const x = column.get(a);
      const y = column.get(b);
      if (x === y) return a.id - b.id;
      if (x === null) return 1; // missing values last either way
      if (y === null) return -1;
      return (x < y ? -1 : 1) * direction;
    });
  }, [props.trials, sort]);
  const page = sorted.slice(offset, offset + PAGE_SIZE);
  const header = (c: (typeof COLUMNS)[number]) => (
    <SortHeader key={c.key} sortKey={c.key} sort={sort} onSort={setSort}>
      {c.label}
    </SortHeader>
  );

  return (
    <div>
      <ErrorNote error={props.error} what="trials" />
      <DataTable
        columns={[...COLUMNS.slice(0, 2).map(header), "Hyperparameters", ...COLUMNS.slice(2).map(header)]}
        caption={<>Trials of experiment {props.experiment.id}</>}
        empty={props.trials.length === 0 ? "No trials yet." : null}
      >
        {page.map((t) => (
          <tr key={t.id} data-trial-id={t.id}>
            <td class="num">
              <Link href={`/trials/${t.id}`}>{t.id}</Link>
            </td>
            <td>
              <StateBadge state={t.state} />
            </td>
            <td class="hparams">
              {Object.entries(flattenHparams(t.hparams))
                .map(([k, v]) => `${k}=${formatValue(v)}`)
                .join(", ")}
            </td>
            <td class="num">{t.restarts}</td>
            <td class="num">{t.totalBatchesProcessed}</td>
            <td class="num">{formatMetric(num(t.searcherMetricValue))}</td>
            <td class="num">
              {t.checkpointCount} <span class="muted">({formatBytes(t.totalCheckpointSize)})</span>
            </td>
            <td class="num">{formatDuration(durationBetween(t.startTime, t.endTime))}</td>
          </tr>
        ))}
      </DataTable>
      <Pager label="Trial pages" offset={offset} limit={PAGE_SIZE} total={sorted.length} onChange={setOffset} />
    </div>
  );
}

"""What a foreign key costs a metric batch's COPY on PostgreSQL: the reason the metrics table has
none (migration 0013).

The same 2,000-row batches of ten-scalar reports (Cairn's columns, unique key and index) are
copied into two tables of a scratch database, one with a foreign key to a one-row `trials` table
and one without, alternating, each batch committed with an UPDATE of the trial's row (as intake
updates its summary). PostgreSQL checks a foreign key once per inserted row.

    .venv/bin/python -m bench.metric_copy_key [--batches 50] [--rounds 3]

Prints the milliseconds per batch, median over the rounds, for each table.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import time
from datetime import UTC, datetime

import psycopg2

from bench.metric_intake import scratch_postgres

BATCH = 2000
TABLE = """
CREATE TABLE {name} (
  id BIGSERIAL PRIMARY KEY,
  trial_id INTEGER NOT NULL {key}, trial_run_id INTEGER NOT NULL, seq BIGINT,
  group_name VARCHAR(64) NOT NULL, steps_completed BIGINT NOT NULL, report_time TIMESTAMPTZ NOT NULL,
  metrics JSON NOT NULL, batch_metrics JSON, archived BOOLEAN NOT NULL,
  UNIQUE (trial_id, trial_run_id, seq)
);
CREATE INDEX {name}_steps ON {name} (trial_id, group_name, steps_completed);
"""
COLUMNS = "trial_id, trial_run_id, seq, group_name, steps_completed, report_time, metrics, archived"


def batch_text(first_seq: int) -> bytes:
    at = datetime.now(UTC).isoformat()
    lines = []
    for seq in range(first_seq, first_seq + BATCH):
        values = json.dumps({f"metric_{i}": seq * 0.001 + i for i in range(10)}, separators=(",", ":"))
        lines.append(f"1\t1\t{seq}\ttraining\t{seq}\t{at}\t{values}\tf\n")
    return "".join(lines).encode()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", type=int, default=50, help="batches per table per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    spent: dict[str, list[float]] = {"without the key": [], "with the key": []}
    loads = [os.getloadavg()[0]]
    with scratch_postgres() as url, psycopg2.connect(url) as conn, conn.cursor() as cursor:
        cursor.execute("CREATE TABLE trials (id INTEGER PRIMARY KEY, reports INTEGER NOT NULL)")
        cursor.execute("INSERT INTO trials VALUES (1, 0)")
        cursor.execute(TABLE.format(name="unkeyed", key=""))
        cursor.execute(TABLE.format(name="keyed", key="REFERENCES trials (id) ON DELETE CASCADE"))
        conn.commit()
        texts = [batch_text(1 + k * BATCH) for k in range(args.batches * args.rounds)]
        for round_ in range(args.rounds):
            for label, table in (("without the key", "unkeyed"), ("with the key", "keyed")):
                total = 0.0
                for k in range(args.batches):
                    text = texts[round_ * args.batches + k]
                    started = time.perf_counter()
                    cursor.copy_expert(f"COPY {table} ({COLUMNS}) FROM STDIN", io.BytesIO(text))
                    cursor.execute("UPDATE trials SET reports = reports + %s WHERE id = 1", (BATCH,))
                    conn.commit()
                    total += time.perf_counter() - started
                spent[label].append(total / args.batches * 1000)
            loads.append(os.getloadavg()[0])
    print(
        f"{BATCH}-row batches, {args.batches} per table per round, medians of {args.rounds} rounds; "
        f"load average {min(loads):.1f}-{max(loads):.1f}"
    )
    for label, values in spent.items():
        print(f"{label:16} {statistics.median(values):6.1f} ms per batch")


if __name__ == "__main__":
    main()

"""Trial code for bench.metric_intake: reports BENCH_REPORTS training reports of ten scalars as fast
as the Core API takes them, then leaves the context (which waits until every report is stored),
and prints when it started and when the last report was stored."""

from __future__ import annotations

import json
import os
import time

import cairn.core

NAMES = [f"metric_{i}" for i in range(10)]


def main() -> None:
    reports = int(os.environ.get("BENCH_REPORTS", "20000"))
    with cairn.core.init(tensorboard_mode=cairn.core.TensorboardMode.MANUAL) as core:
        started = time.time()
        for step in range(1, reports + 1):
            core.train.report_training_metrics(step, {name: step * 0.001 + i for i, name in enumerate(NAMES)})
        core.train.report_validation_metrics(reports, {"loss": 0.0})
    # The context waited for the master to store every report.
    print("BENCH " + json.dumps({"started": started, "stored": time.time(), "reports": reports}), flush=True)


if __name__ == "__main__":
    main()

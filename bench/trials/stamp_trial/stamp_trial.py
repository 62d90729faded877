"""bench/handover_chain.py's trainable: the sleeping trial of bench/trial_overhead.py, which also
appends when its script started, its Core API was up, its report was made and its Core API closed
(wall-clock seconds) to the file STAMPS names."""

import os
import time

started = time.time()

import cairn.core  # noqa: E402  (the script's start is stamped before the import, as a user's would be)

with cairn.core.init() as core:
    ready = time.time()
    x = float(core.info.trial.hparams["x"]) if core.info.trial else 0.5
    time.sleep(1.0)
    core.train.report_validation_metrics(1, {"loss": (x - 0.3) ** 2})
    reported = time.time()
closed = time.time()
trial_id = core.info.trial.trial_id if core.info.trial else 0
with open(os.environ["STAMPS"], "a") as stamps:
    stamps.write(f"{trial_id} {started:.4f} {ready:.4f} {reported:.4f} {closed:.4f}\n")

"""The benchmark's trainable: sleep one second, report one validation metric, exit."""

import time

import cairn.core

with cairn.core.init() as core:
    x = float(core.info.trial.hparams["x"]) if core.info.trial else 0.5
    time.sleep(1.0)
    core.train.report_validation_metrics(1, {"loss": (x - 0.3) ** 2})

"""The Cairn trial of the search-quality benchmark, written against the Core API.

It trains for the length each searcher operation asks (in epochs), reports the validation error
after every epoch together with `epochs` (the searcher's time metric) and the time it measured it,
checkpoints at the end of each operation and when preempted, and resumes from the latest
checkpoint: in promotion mode a promoted trial starts again and goes on from its rung.

Shipped in the model definition as bench/hpo/cairn_trial.py beside bench/hpo/task.py and started
with `python3 -m bench.hpo.cairn_trial`.
"""

from __future__ import annotations

import logging
import time

import cairn.core
from bench.hpo.task import Hyperparameters, Training

log = logging.getLogger("bench.hpo.trial")
STATE_FILE = "training.pt"


def main(core: cairn.core.Context) -> None:
    trial = core.info.trial
    if trial is None:
        raise SystemExit("the benchmark trial runs on a Cairn cluster only")
    training = Training(Hyperparameters.from_mapping(dict(trial.hparams)), seed=trial.trial_seed)
    if core.info.latest_checkpoint:
        with core.checkpoint.restore_path(core.info.latest_checkpoint) as path:
            training.restore((path / STATE_FILE).read_bytes())
        log.info("resumed at epoch %d", training.epochs)

    def checkpoint() -> None:
        with core.checkpoint.store_path({"steps_completed": training.epochs}) as (path, _uuid):
            (path / STATE_FILE).write_bytes(training.state_bytes())

    error = 1.0
    for op in core.searcher.operations():
        while training.epochs < op.length:
            training.train_epoch()
            error = training.validation_error()
            core.train.report_validation_metrics(
                steps_completed=training.epochs,
                metrics={"validation_error": error, "epochs": training.epochs, "wall_time": time.time()},
            )
            op.report_progress(training.epochs)
            if core.preempt.should_preempt():
                checkpoint()
                return
        op.report_completed(error)
        checkpoint()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s")
    with cairn.core.init() as core_context:
        main(core_context)

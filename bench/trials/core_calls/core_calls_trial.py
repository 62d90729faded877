"""The search benchmark's trial (bench/hpo/cairn_trial.py) without the training: the same Core API
calls a trial makes to the master (its searcher operations, a validation report and progress each
epoch, the operation's completion, a checkpoint at its end, the restore of a promoted trial), so
the control plane's cost of a trial is measured alone."""

import time

import cairn.core

STATE_FILE = "epochs"

with cairn.core.init() as core:
    epochs = 0
    if core.info.latest_checkpoint:
        with core.checkpoint.restore_path(core.info.latest_checkpoint) as path:
            epochs = int((path / STATE_FILE).read_text())
    for op in core.searcher.operations():
        while epochs < op.length:
            epochs += 1
            error = 1.0 / (epochs + float(core.info.trial.hparams["x"]))
            core.train.report_validation_metrics(
                steps_completed=epochs,
                metrics={"validation_error": error, "epochs": epochs, "wall_time": time.time()},
            )
            op.report_progress(epochs)
            if core.preempt.should_preempt():
                break
        op.report_completed(1.0 / (epochs + float(core.info.trial.hparams["x"])))
        with core.checkpoint.store_path({"steps_completed": epochs}) as (path, _uuid):
            (path / STATE_FILE).write_text(str(epochs))

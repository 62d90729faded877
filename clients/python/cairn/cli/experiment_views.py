"""Rows and summaries for experiments and their trials (pure: messages in, strings out)."""

from __future__ import annotations

import time

from cairn.api.v1 import experiment_pb2, trial_pb2
from cairn.cli.output import (
    bool_text,
    bytes_text,
    duration_text,
    enum_label,
    mapping_text,
    metric_text,
    percent_text,
    struct_to_dict,
    timestamp_text,
)

EXPERIMENT_COLUMNS = (
    "ID",
    "Owner",
    "Name",
    "State",
    "Progress",
    "Trials",
    "Best metric",
    "Started",
    "Ended",
    "Resource Pool",
)
TRIAL_COLUMNS = (
    "Trial ID",
    "State",
    "Restarts",
    "Steps",
    "Best metric",
    "Started",
    "Ended",
    "Hyperparameters",
)


def experiment_state(exp: experiment_pb2.Experiment) -> str:
    return enum_label(experiment_pb2.Experiment.State.Name(exp.state))


def trial_state(trial: trial_pb2.Trial) -> str:
    return enum_label(trial_pb2.Trial.State.Name(trial.state))


def best_metric(exp: experiment_pb2.Experiment) -> float | None:
    return exp.best_trial_searcher_metric if exp.HasField("best_trial_searcher_metric") else None


def progress(exp: experiment_pb2.Experiment) -> float | None:
    return exp.progress if exp.HasField("progress") else None


def experiment_row(exp: experiment_pb2.Experiment, show_archived: bool = False) -> list[str]:
    state = experiment_state(exp)
    if show_archived and exp.archived:
        state += " (archived)"
    return [
        str(exp.id),
        exp.username,
        exp.name,
        state,
        percent_text(progress(exp)),
        str(exp.num_trials),
        metric_text(best_metric(exp)),
        timestamp_text(exp.start_time if exp.HasField("start_time") else None),
        timestamp_text(exp.end_time if exp.HasField("end_time") else None),
        exp.resource_pool,
    ]


def _duration(exp: experiment_pb2.Experiment) -> str:
    if exp.HasField("duration"):
        return duration_text(exp.duration / 1000)
    if exp.HasField("start_time"):
        end = exp.end_time.seconds if exp.HasField("end_time") else time.time()
        return duration_text(end - exp.start_time.seconds)
    return ""


def experiment_summary(
    exp: experiment_pb2.Experiment, job: experiment_pb2.JobSummary | None = None
) -> list[tuple[str, str]]:
    metric = best_metric(exp)
    best = ""
    if metric is not None:
        best = metric_text(metric)
        if exp.HasField("best_trial_id"):
            best += f" (trial {exp.best_trial_id})"
    searcher = exp.searcher_type
    if exp.searcher_metric:
        direction = "smaller is better" if exp.smaller_is_better else "larger is better"
        searcher += f" on {exp.searcher_metric} ({direction})"
    pairs = [
        ("ID", str(exp.id)),
        ("Name", exp.name),
        ("Owner", exp.username),
        ("State", experiment_state(exp)),
        ("Archived", bool_text(exp.archived)),
        ("Progress", percent_text(progress(exp))),
        ("Searcher", searcher),
        ("Best metric", best),
        ("Trials", str(exp.num_trials)),
        ("Checkpoints", f"{exp.checkpoint_count} ({bytes_text(exp.checkpoint_size)})"),
        ("Resource pool", exp.resource_pool),
        ("Started", timestamp_text(exp.start_time if exp.HasField("start_time") else None)),
        ("Ended", timestamp_text(exp.end_time if exp.HasField("end_time") else None)),
        ("Duration", _duration(exp)),
        ("Labels", ", ".join(exp.labels)),
        ("Description", exp.description),
    ]
    if exp.HasField("forked_from"):
        pairs.append(("Forked from", str(exp.forked_from)))
    if job is not None and job.state:
        queue = enum_label(experiment_pb2.JobSummary.State.Name(job.state))
        if job.jobs_ahead:
            queue += f" ({job.jobs_ahead} jobs ahead)"
        pairs.append(("Queue", queue))
    return [(key, value) for key, value in pairs if value]


def trial_metric(trial: trial_pb2.Trial) -> float | None:
    return trial.searcher_metric_value if trial.HasField("searcher_metric_value") else None


def trial_row(trial: trial_pb2.Trial) -> list[str]:
    return [
        str(trial.id),
        trial_state(trial),
        str(trial.restarts),
        str(trial.total_batches_processed),
        metric_text(trial_metric(trial)),
        timestamp_text(trial.start_time if trial.HasField("start_time") else None),
        timestamp_text(trial.end_time if trial.HasField("end_time") else None),
        mapping_text(struct_to_dict(trial.hparams)),
    ]


def trial_summary(trial: trial_pb2.Trial) -> list[tuple[str, str]]:
    best_validation = ""
    if trial.HasField("best_validation") and trial.best_validation.HasField("metrics"):
        best_validation = mapping_text(struct_to_dict(trial.best_validation.metrics.avg_metrics))
    latest_validation = ""
    if trial.HasField("latest_validation") and trial.latest_validation.HasField("metrics"):
        latest_validation = mapping_text(struct_to_dict(trial.latest_validation.metrics.avg_metrics))
    pairs = [
        ("Trial ID", str(trial.id)),
        ("Experiment", str(trial.experiment_id)),
        ("State", trial_state(trial)),
        ("Restarts", str(trial.restarts)),
        ("Steps", str(trial.total_batches_processed)),
        ("Searcher target", str(trial.searcher_target) if trial.searcher_target else ""),
        ("Searcher metric", metric_text(trial_metric(trial))),
        ("Best validation", best_validation),
        ("Latest validation", latest_validation),
        ("Best checkpoint", trial.best_checkpoint.uuid if trial.HasField("best_checkpoint") else ""),
        ("Latest checkpoint", trial.latest_checkpoint_uuid),
        ("Checkpoints", f"{trial.checkpoint_count} ({bytes_text(trial.total_checkpoint_size)})"),
        ("Hyperparameters", mapping_text(struct_to_dict(trial.hparams))),
        ("Seed", str(trial.seed) if trial.seed else ""),
        ("Request ID", trial.request_id),
        ("Allocation", f"{trial.allocation_id} (run {trial.run_id})" if trial.allocation_id else ""),
        ("Started", timestamp_text(trial.start_time if trial.HasField("start_time") else None)),
        ("Ended", timestamp_text(trial.end_time if trial.HasField("end_time") else None)),
        ("Wall-clock time", duration_text(trial.wall_clock_time)),
        ("Warm start", trial.warm_start_checkpoint_uuid),
    ]
    return [(key, value) for key, value in pairs if value]

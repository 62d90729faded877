from __future__ import annotations

import json
from typing import Any

from google.protobuf.struct_pb2 import Struct
from google.protobuf.timestamp_pb2 import Timestamp
from rich.console import Console

from cairn.api.v1 import agent_pb2, checkpoint_pb2, common_pb2, experiment_pb2, resourcepool_pb2, trial_pb2
from cairn.cli.agent import agent_row, pool_row, slot_rows
from cairn.cli.checkpoint import checkpoint_row, checkpoint_summary
from cairn.cli.experiment import previewed_trial_row, search_summary_rows
from cairn.cli.experiment_follow import EXIT_CANCELED, EXIT_COMPLETED, EXIT_ERROR, take_snapshot
from cairn.cli.experiment_views import EXPERIMENT_COLUMNS, experiment_row, experiment_summary, trial_row
from cairn.cli.output import build_table, bytes_text, mapping_text, message_to_dict, percent_text

Exp = experiment_pb2.Experiment
Trial = trial_pb2.Trial


def struct(data: dict[str, Any]) -> Struct:
    value = Struct()
    value.update(data)
    return value


def experiment(**overrides: object) -> experiment_pb2.Experiment:
    exp = Exp(
        id=7,
        username="determined",
        name="mnist",
        state=Exp.STATE_ACTIVE,
        num_trials=4,
        resource_pool="default",
        searcher_metric="validation_loss",
        smaller_is_better=True,
        searcher_type="asha",
    )
    for key, value in overrides.items():
        if isinstance(value, list):
            getattr(exp, key).extend(value)
        else:
            setattr(exp, key, value)
    return exp


def test_experiment_row_formats_every_column() -> None:
    exp = experiment(progress=0.425, best_trial_searcher_metric=0.0312345678)
    exp.start_time.CopyFrom(Timestamp(seconds=1_700_000_000))
    row = experiment_row(exp)
    assert len(row) == len(EXPERIMENT_COLUMNS)
    assert row[:7] == ["7", "determined", "mnist", "ACTIVE", "42.5%", "4", "0.0312346"]
    assert row[7].startswith("2023-11-1")  # local time of 1_700_000_000
    assert row[8] == ""  # not ended
    assert row[9] == "default"


def test_unset_optionals_render_empty() -> None:
    row = experiment_row(experiment())
    assert row[4] == "" and row[6] == ""


def test_archived_marker_only_when_listing_all() -> None:
    exp = experiment(archived=True, state=Exp.STATE_COMPLETED)
    assert experiment_row(exp)[3] == "COMPLETED"
    assert experiment_row(exp, show_archived=True)[3] == "COMPLETED (archived)"


def test_experiment_summary_mentions_best_trial_and_direction() -> None:
    exp = experiment(best_trial_searcher_metric=0.5, best_trial_id=3, labels=["a", "b"])
    summary = dict(
        experiment_summary(
            exp, experiment_pb2.JobSummary(state=experiment_pb2.JobSummary.STATE_QUEUED, jobs_ahead=2)
        )
    )
    assert summary["Best metric"] == "0.5 (trial 3)"
    assert summary["Searcher"] == "asha on validation_loss (smaller is better)"
    assert summary["Labels"] == "a, b"
    assert summary["Queue"] == "QUEUED (2 jobs ahead)"


def test_trial_row_flattens_nested_hparams() -> None:
    trial = Trial(id=3, state=Trial.STATE_RUNNING, restarts=1, total_batches_processed=640)
    trial.hparams.CopyFrom(struct({"lr": 0.01, "layers": 3, "optimizer": {"name": "adam", "beta": 0.9}}))
    trial.searcher_metric_value = 0.25
    row = trial_row(trial)
    assert row[:5] == ["3", "RUNNING", "1", "640", "0.25"]
    assert row[7] == "layers=3, lr=0.01, optimizer.beta=0.9, optimizer.name=adam"


def test_checkpoint_row_and_summary() -> None:
    ckpt = checkpoint_pb2.Checkpoint(uuid="abc-123", state=checkpoint_pb2.Checkpoint.STATE_COMPLETED)
    ckpt.resources["model.pt"] = 3 * 1024 * 1024
    ckpt.resources["state.json"] = 1024
    ckpt.metadata.CopyFrom(struct({"steps_completed": 500}))
    ckpt.training.trial_id = 4
    ckpt.training.experiment_id = 7
    ckpt.training.searcher_metric = 0.125
    assert checkpoint_row(ckpt)[:6] == ["abc-123", "4", "500", "COMPLETED", "3.0 MiB", "0.125"]
    summary = dict(checkpoint_summary(ckpt))
    assert summary["Size"] == "3.0 MiB in 2 files"
    assert summary["Experiment"] == "7"


def test_slot_rows_one_per_slot_with_allocation() -> None:
    agent = agent_pb2.Agent(id="agent-1", resource_pools=["default"], enabled=True, connected=True)
    for slot_id in ("10", "2"):
        slot = agent.slots[slot_id]
        slot.id = slot_id
        slot.enabled = True
        slot.device.type = common_pb2.TYPE_CUDA
        slot.device.brand = "NVIDIA H100"
    agent.slots["2"].container.parent = "alloc-9"
    agent.slots["2"].container.id = "ctr-1"
    agent.slots["10"].enabled = False
    agent.slots["10"].unhealthy = "Xid 79 (GPU has fallen off the bus)"
    rows = slot_rows(agent)
    assert [row[2] for row in rows] == ["2", "10"]  # numeric order
    assert rows[0] == [
        "agent-1",
        "default",
        "2",
        "CUDA",
        "NVIDIA H100",
        "yes",
        "no",
        "ok",
        "alloc-9",
        "ctr-1",
    ]
    assert rows[1][5:] == ["no", "no", "unhealthy: Xid 79 (GPU has fallen off the bus)", "", ""]
    assert agent_row(agent)[3] == "2"


def test_pool_row() -> None:
    pool = resourcepool_pb2.ResourcePool(
        name="default",
        type=resourcepool_pb2.ResourcePool.RESOURCE_POOL_TYPE_STATIC,
        num_agents=2,
        slots_used=1,
        slots_available=4,
        slot_type=common_pb2.TYPE_CPU,
        scheduler_type=resourcepool_pb2.ResourcePool.SCHEDULER_TYPE_PRIORITY,
        scheduler_fitting_policy=resourcepool_pb2.ResourcePool.FITTING_POLICY_BEST,
        default_priority=42,
        default_compute_pool=True,
        default_aux_pool=True,
    )
    assert pool_row(pool) == [
        "default",
        "STATIC",
        "2",
        "1",
        "4",
        "CPU",
        "PRIORITY",
        "BEST",
        "42",
        "no",
        "compute, aux",
        "",
    ]
    pool.provisioner.CopyFrom(
        resourcepool_pb2.ProvisionerStatus(
            provider="local",
            min_instances=0,
            max_instances=3,
            instances=[resourcepool_pb2.ProvisionedInstance(id="a", phase="RUNNING")],
        )
    )
    assert pool_row(pool)[-1] == "local (1 of 0-3)"


def test_preview_rows() -> None:
    summary = experiment_pb2.SearchSummary(
        trials=[
            experiment_pb2.TrialSummary(count=9, unit=experiment_pb2.SearchUnit(name="batches", value=100)),
            experiment_pb2.TrialSummary(count=1, unit=experiment_pb2.SearchUnit(max_length=True)),
        ]
    )
    assert search_summary_rows(summary) == [["9", "100 batches"], ["1", "max length"]]
    trial = experiment_pb2.PreviewedTrial(request_id="r1", lengths=[100, 300, 900], bracket=1)
    trial.hparams.CopyFrom(struct({"lr": 0.1}))
    assert previewed_trial_row(trial) == ["r1", "1", "100 → 300 → 900", "lr=0.1"]


def test_json_uses_lower_camel_case_and_includes_defaults() -> None:
    response = experiment_pb2.GetExperimentsResponse(experiments=[experiment(progress=0.5)])
    data = message_to_dict(response)
    first = data["experiments"][0]
    assert first["id"] == 7
    assert first["resourcePool"] == "default"
    assert first["state"] == "STATE_ACTIVE"
    assert first["archived"] is False  # defaults are printed, as Determined's REST does
    assert first["progress"] == 0.5
    json.dumps(data)


def test_table_cells_are_not_read_as_markup() -> None:
    console = Console(width=120, record=True)
    console.print(build_table(["Hyperparameters"], [["layers=[1,2] [bold]x[/bold]"]]))
    assert "layers=[1,2] [bold]x[/bold]" in console.export_text()


def test_small_formatters() -> None:
    assert bytes_text(512) == "512 B"
    assert bytes_text(1536) == "1.5 KiB"
    assert percent_text(1.0) == "100.0%"
    assert mapping_text({"a": {"b": 1.0}, "c": "x", "d": [1, 2]}) == "a.b=1, c=x, d=[1,2]"


def follow_trials(*states: Trial.State.ValueType) -> list[trial_pb2.Trial]:
    return [Trial(id=i + 1, state=state) for i, state in enumerate(states)]


def test_follow_snapshot_counts_and_best_metric() -> None:
    trials = follow_trials(
        Trial.STATE_QUEUED,
        Trial.STATE_ACTIVE,
        Trial.STATE_RUNNING,
        Trial.STATE_STOPPING_COMPLETED,
        Trial.STATE_COMPLETED,
        Trial.STATE_ERROR,
        Trial.STATE_PAUSED,
    )
    trials[1].runner_state = "PENDING"  # ACTIVE, waiting for slots
    trials.append(Trial(id=8, state=Trial.STATE_ACTIVE, runner_state="RUNNING"))
    trials[4].searcher_metric_value = 0.3
    trials[2].searcher_metric_value = 0.2
    snap = take_snapshot(experiment(progress=0.5), trials)
    assert (snap.queued, snap.running, snap.done, snap.paused) == (2, 3, 2, 1)
    # The experiment carries no best, so it comes from the trials (smaller is better).
    assert (snap.best_metric, snap.best_trial) == (0.2, 3)
    assert not snap.terminal
    assert snap.summary() == (
        "Experiment 7 ACTIVE · trials: 2 queued, 3 running, 2 done, 1 paused · "
        "best validation_loss: 0.2 (trial 3) · progress 50.0%"
    )


def test_follow_snapshot_prefers_the_masters_best_and_maps_exit_codes() -> None:
    exp = experiment(state=Exp.STATE_COMPLETED, best_trial_searcher_metric=0.1, best_trial_id=9)
    snap = take_snapshot(exp, [])
    assert snap.terminal and snap.exit_code == EXIT_COMPLETED
    assert (snap.best_metric, snap.best_trial) == (0.1, 9)
    assert take_snapshot(experiment(state=Exp.STATE_ERROR), []).exit_code == EXIT_ERROR
    assert take_snapshot(experiment(state=Exp.STATE_CANCELED), []).exit_code == EXIT_CANCELED
    assert not take_snapshot(experiment(state=Exp.STATE_STOPPING_CANCELED), []).terminal


def test_follow_best_metric_larger_is_better() -> None:
    trials = follow_trials(Trial.STATE_COMPLETED, Trial.STATE_COMPLETED)
    trials[0].searcher_metric_value = 0.9
    trials[1].searcher_metric_value = 0.8
    snap = take_snapshot(experiment(smaller_is_better=False), trials)
    assert (snap.best_metric, snap.best_trial) == (0.9, 1)

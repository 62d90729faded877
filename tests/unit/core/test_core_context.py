"""cairn.core.init() on a cluster: what the trial learns from its environment, InvalidHP, exits, and
the distributed context."""

from __future__ import annotations

import pytest

import cairn.core
from cairn.core import exit_notice
from cairn.core.cluster_info import cluster_info_from_env
from tests.unit.core.conftest import ClusterEnv
from tests.unit.core.core_master_double import TOKEN


def test_info_from_the_trial_environment(cluster_env: ClusterEnv) -> None:
    info = cairn.core.get_cluster_info()
    assert info is not None
    assert info.on_cluster
    assert info.allocation_id == cluster_env.allocation_id
    assert info.task_id == "7.3"
    assert info.agent_id == "agent-1"
    assert info.slot_ids == [0]
    assert info.latest_checkpoint is None
    assert info.user_data == {"url": "https://example.invalid/data"}
    assert TOKEN not in repr(info)
    trial = info.trial
    assert (trial.trial_id, trial.experiment_id, trial.trial_seed) == (3, 7, 1234)
    assert (trial.trial_run_id, trial.steps_completed) == (2, 40)
    assert trial.hparams == {"lr": 0.1, "layers": 2}
    assert trial.config["searcher"]["metric"] == "loss"
    # Determined's private names, which its users' scripts read.
    assert trial._config is trial.config
    with cairn.core.init() as core:
        assert core.info == info
        assert core.distributed.get_size() == 1


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        pytest.param("CAIRN_MASTER_ADDR", "", "CAIRN_MASTER_ADDR: not set", id="no-master"),
        pytest.param("CAIRN_TRIAL_ID", "three", "CAIRN_TRIAL_ID: must be an integer", id="bad-trial-id"),
        pytest.param("CAIRN_HPARAMS", "{oops", "CAIRN_HPARAMS: not valid JSON", id="bad-json"),
        pytest.param("CAIRN_HPARAMS", "[1]", "CAIRN_HPARAMS: must be a JSON dict", id="hparams-not-dict"),
        pytest.param(
            "CAIRN_SLOT_IDS", '["a"]', "CAIRN_SLOT_IDS: must be a JSON list of integers", id="slots"
        ),
    ],
)
def test_broken_environment_names_the_variable(
    cluster_env: ClusterEnv, monkeypatch: pytest.MonkeyPatch, name: str, value: str, message: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(cairn.core.ClusterInfoError, match=message):
        cairn.core.init()


def test_master_address_may_carry_a_scheme() -> None:
    info = cluster_info_from_env(
        {
            "CAIRN_MASTER_ADDR": "grpc://master.example:8090/",
            "CAIRN_ALLOCATION_ID": "1.1.1",
            "CAIRN_ALLOCATION_TOKEN": "t",
            "CAIRN_TRIAL_ID": "1",
            "CAIRN_EXPERIMENT_ID": "1",
            "CAIRN_TRIAL_RUN_ID": "1",
            "CAIRN_LATEST_CHECKPOINT": "abc",
        }
    )
    assert info is not None
    assert info.master_address == "master.example:8090"
    assert info.task_id == "1.1"
    assert info.latest_checkpoint == "abc"


def test_invalid_hp_reports_early_exit_and_exits_zero(cluster_env: ClusterEnv) -> None:
    with pytest.raises(SystemExit) as exited, cairn.core.init() as core:
        core.train.report_training_metrics(1, {"loss": 1.0})
        raise cairn.core.InvalidHP("learning rate too large")
    assert exited.value.code == 0
    (early_exit,) = cluster_env.master.calls.of("ReportTrialSearcherEarlyExit")
    assert early_exit.trial_id == 3
    assert early_exit.early_exit.reason == early_exit.early_exit.EXITED_REASON_INVALID_HP
    # Metrics reported before the InvalidHP were still delivered.
    assert [r.seq for r in cluster_env.master.stored_reports] == [1]


def test_training_error_propagates_after_flushing(cluster_env: ClusterEnv) -> None:
    with pytest.raises(ZeroDivisionError), cairn.core.init() as core:
        core.train.report_training_metrics(1, {"loss": 1.0})
        _ = 1 / 0
    assert [r.seq for r in cluster_env.master.stored_reports] == [1]
    assert cluster_env.master.calls.of("ReportTrialSearcherEarlyExit") == []


def test_distributed_context_is_single_process() -> None:
    single = cairn.core.DistributedContext(
        rank=0, size=1, local_rank=0, local_size=1, cross_rank=0, cross_size=1
    )
    assert single.allgather("x") == ["x"]
    assert single.gather("x") == ["x"]
    assert single.broadcast("x") == "x"
    assert single.allgather_local(1) == [1]
    assert single.gather_local(1) == [1]
    assert single.broadcast_local(1) == 1
    assert (single.get_rank(), single.get_local_rank(), single.get_num_agents()) == (0, 0, 1)
    assert cairn.core.DummyDistributedContext().is_chief


def test_rank_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="chief_ip: required when the job spans machines"):
        cairn.core.DistributedContext(rank=1, size=2, local_rank=0, local_size=1, cross_rank=1, cross_size=2)
    with pytest.raises(ValueError, match=r"rank: must be in \[0, size\)"):
        cairn.core.DistributedContext(rank=1, size=1, local_rank=0, local_size=1, cross_rank=0, cross_size=1)
    with pytest.raises(TypeError, match="local_size: must be an integer"):
        cairn.core.DistributedContext(
            rank=0,
            size=1,
            local_rank=0,
            local_size="1",  # type: ignore[arg-type]
            cross_rank=0,
            cross_size=1,
        )


def test_torch_distributed_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CAIRN_CHIEF_IP", raising=False)
    monkeypatch.delenv("DET_CHIEF_IP", raising=False)
    for name, value in {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "GROUP_RANK": "0",
        "GROUP_WORLD_SIZE": "1",
    }.items():
        monkeypatch.setenv(name, value)
    assert cairn.core.DistributedContext.from_torch_distributed().get_size() == 1
    monkeypatch.setenv("GROUP_WORLD_SIZE", "x")
    with pytest.raises(ValueError, match="GROUP_WORLD_SIZE: must be an integer"):
        cairn.core.DistributedContext.from_torch_distributed()


def test_a_clean_exit_tells_the_master_the_allocation_is_exiting(cluster_env: ClusterEnv) -> None:
    # The notice goes at the interpreter's exit (an atexit hook): sent by hand here.
    with cairn.core.init() as core:
        core.train.report_training_metrics(1, {"loss": 1.0})
    assert cluster_env.master.calls.of("NotifyAllocationExiting") == []
    assert exit_notice.send_pending()
    [notice] = cluster_env.master.calls.of("NotifyAllocationExiting")
    assert notice.allocation_id == cluster_env.allocation_id
    assert not exit_notice.send_pending()  # once


def test_no_notice_after_a_failure_or_when_another_context_follows(cluster_env: ClusterEnv) -> None:
    with pytest.raises(RuntimeError), cairn.core.init():
        raise RuntimeError("training failed")
    assert not exit_notice.send_pending()
    with cairn.core.init():
        pass
    with cairn.core.init():  # the process went on: the first close's notice is dropped
        pass
    assert exit_notice.send_pending()
    assert len(cluster_env.master.calls.of("NotifyAllocationExiting")) == 1

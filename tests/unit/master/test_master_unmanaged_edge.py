"""The unmanaged-run RPCs at the servicer edge, as the stock core_v2 client calls them: the messages it
sends become the domain's calls, what it may not send is refused naming the field, and nothing is
stored by a refused call."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import struct_pb2

from cairn.api.v1 import experiment_pb2 as epb
from cairn.api.v1 import trial_pb2 as tpb
from services.common import interceptors
from services.common.principal import Principal
from services.master.domain.kernel.task_ids import trial_task_id
from services.master.servicers.api.service import CairnServicer
from tests.unit.master.domain.harness import Master
from tests.unit.master.domain.test_domain_unmanaged import core_v2_config
from tests.unit.master.servicer_double import Aborted, Context, api_deps


@pytest.fixture
def api(master: Master) -> CairnServicer:
    return CairnServicer(api_deps(master))


def call(api: CairnServicer, name: str, request: Any, principal: Principal) -> Any:
    token = interceptors._principal.set(principal)
    try:
        return getattr(api, name)(request, Context())
    finally:
        interceptors._principal.reset(token)


def refusal(api: CairnServicer, name: str, request: Any, principal: Principal) -> tuple[str, str]:
    with pytest.raises(Aborted) as caught:
        call(api, name, request, principal)
    return caught.value.code.name, str(caught.value)


def test_the_core_v2_calls_in_order(master: Master, api: CairnServicer) -> None:
    admin = master.admin
    create = epb.CreateExperimentRequest(config=core_v2_config(), unmanaged=True)
    put = call(
        api,
        "PutExperiment",
        epb.PutExperimentRequest(create_experiment_request=create, external_experiment_id="e"),
        admin,
    )
    assert put.experiment.unmanaged and put.experiment.state == epb.Experiment.STATE_PAUSED
    again = call(
        api,
        "PutExperiment",
        epb.PutExperimentRequest(create_experiment_request=create, external_experiment_id="e"),
        admin,
    )
    assert again.experiment.id == put.experiment.id

    hparams = struct_pb2.Struct()
    hparams.update({"lr": 0.1})
    trial_request = tpb.CreateTrialRequest(experiment_id=put.experiment.id, hparams=hparams, unmanaged=True)
    trial = call(
        api, "PutTrial", tpb.PutTrialRequest(create_trial_request=trial_request, external_trial_id="t"), admin
    ).trial
    assert trial.task_id == trial_task_id(put.experiment.id, "t")
    assert trial.state == tpb.Trial.STATE_PAUSED and dict(trial.hparams) == {"lr": 0.1}

    started = call(api, "StartTrial", tpb.StartTrialRequest(trial_id=trial.id, resume=True), admin)
    assert started.trial_run_id == 1 and not started.HasField("latest_checkpoint")
    running = call(
        api, "PatchTrial", tpb.PatchTrialRequest(trial_id=trial.id, state=tpb.Trial.STATE_RUNNING), admin
    )
    assert running.trial.state == tpb.Trial.STATE_RUNNING  # as Determined stores and answers it
    call(api, "PatchTrial", tpb.PatchTrialRequest(trial_id=trial.id), admin)  # a heartbeat
    call(
        api,
        "ShipTaskLogs",
        tpb.ShipTaskLogsRequest(
            logs=[
                tpb.ShippedLogLine(
                    task_id=trial.task_id, timestamp="2026-12-02T04:00:00+00:00", rank="0", log="hi\n"
                )
            ]
        ),
        admin,
    )
    done = call(
        api, "PatchTrial", tpb.PatchTrialRequest(trial_id=trial.id, state=tpb.Trial.STATE_COMPLETED), admin
    )
    assert done.trial.state == tpb.Trial.STATE_COMPLETED
    assert master.experiment(put.experiment.id).state == "COMPLETED"


def test_what_the_client_may_not_send_is_refused(master: Master, api: CairnServicer) -> None:
    admin = master.admin
    code, why = refusal(
        api,
        "PutExperiment",
        epb.PutExperimentRequest(
            create_experiment_request=epb.CreateExperimentRequest(config=core_v2_config()),
            external_experiment_id="e",
        ),
        admin,
    )
    assert code == "INVALID_ARGUMENT" and "create_experiment_request.unmanaged" in why
    code, why = refusal(
        api,
        "CreateExperiment",
        epb.CreateExperimentRequest(config=core_v2_config(), unmanaged=True, validate_only=True),
        admin,
    )
    assert code == "INVALID_ARGUMENT" and "validate_only" in why
    created = call(
        api, "CreateExperiment", epb.CreateExperimentRequest(config=core_v2_config(), unmanaged=True), admin
    )
    exp_id = created.experiment.id
    code, why = refusal(api, "CreateTrial", tpb.CreateTrialRequest(experiment_id=exp_id), admin)
    assert code == "INVALID_ARGUMENT" and "unmanaged" in why
    trial = call(
        api, "CreateTrial", tpb.CreateTrialRequest(experiment_id=exp_id, unmanaged=True), admin
    ).trial
    code, why = refusal(
        api, "PatchTrial", tpb.PatchTrialRequest(trial_id=trial.id, state=tpb.Trial.STATE_QUEUED), admin
    )
    assert code == "INVALID_ARGUMENT" and "STATE_QUEUED" in why
    code, why = refusal(
        api,
        "ShipTaskLogs",
        tpb.ShipTaskLogsRequest(
            logs=[tpb.ShippedLogLine(task_id=trial.task_id, timestamp="yesterday", log="x\n")]
        ),
        admin,
    )
    assert code == "INVALID_ARGUMENT" and "timestamp" in why
    code, why = refusal(
        api,
        "ShipTaskLogs",
        tpb.ShipTaskLogsRequest(logs=[tpb.ShippedLogLine(task_id="nope", log="x\n")]),
        admin,
    )
    assert code == "INVALID_ARGUMENT" and "task_id" in why
    trials = master.trials(exp_id)
    assert [t.state for t in trials] == ["PAUSED"]

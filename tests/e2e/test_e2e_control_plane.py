"""Issue 2's checks with real processes over real sockets: agents and slots, authentication,
experiment creation and refusal, lifecycle actions, health and reflection on every service."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from cairn.api.v1 import agent_pb2, experiment_pb2, master_pb2
from tests.e2e.helpers import config, create, experiment, state, trial_state, trials, wait_state
from tests.support.cluster import TestCluster
from tests.support.polling import wait_for


def test_agents_report_their_slots(cluster: TestCluster) -> None:
    api = cluster.login()
    agents = api.GetAgents(agent_pb2.GetAgentsRequest()).agents
    assert [a.id for a in agents] == ["agent-1"]
    agent = agents[0]
    assert agent.connected and agent.enabled and list(agent.resource_pools) == ["default"]
    assert sorted(agent.slots) == ["0", "1"]
    for slot in agent.slots.values():
        assert slot.device.type == 1  # TYPE_CPU
        assert slot.device.uuid and slot.device.brand


def test_calls_without_a_valid_token_are_unauthenticated(cluster: TestCluster) -> None:
    raw = cluster.raw_stub()
    # Master info is open (Determined's clients ask before logging in).
    assert raw.GetMaster(master_pb2.GetMasterRequest(), timeout=10).cluster_id
    for metadata in ([], [("authorization", "Bearer not-a-token")]):
        with pytest.raises(grpc.RpcError) as failure:
            raw.GetExperiments(experiment_pb2.GetExperimentsRequest(), metadata=metadata, timeout=10)
        assert failure.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_create_lists_active_with_its_trial_and_a_bad_config_changes_nothing(cluster: TestCluster) -> None:
    api = cluster.login()
    experiment_id = create(api, config(hyperparameters={"steps": 200, "step_s": 0.2}))
    listed = api.GetExperiments(experiment_pb2.GetExperimentsRequest()).experiments
    # Stored ACTIVE, answered as its allocation's progress (Determined's derived state).
    assert [e.id for e in listed] == [experiment_id]
    assert experiment_pb2.Experiment.State.Name(listed[0].state) in (
        "STATE_QUEUED",
        "STATE_PULLING",
        "STATE_STARTING",
        "STATE_RUNNING",
    )
    assert listed[0].num_trials == 1 and len(trials(api, experiment_id)) == 1

    with pytest.raises(grpc.RpcError) as failure:
        create(api, config(searcher={"name": "random", "metric": "loss", "max_trials": -1}))
    assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "searcher.max_trials: must be >= 1" in (failure.value.details() or "")
    assert api.GetExperiments(experiment_pb2.GetExperimentsRequest()).pagination.total == 1
    api.KillExperiment(experiment_pb2.KillExperimentRequest(id=experiment_id))
    wait_state(api, experiment_id, "CANCELED")


def test_lifecycle_actions(cluster: TestCluster) -> None:
    api = cluster.login()
    experiment_id = create(api, config(hyperparameters={"steps": 300, "step_s": 0.2}))
    wait_for(
        lambda: trials(api, experiment_id)[0].runner_state == "RUNNING", timeout=60, what="trial running"
    )

    api.PauseExperiment(experiment_pb2.PauseExperimentRequest(id=experiment_id))
    assert state(api, experiment_id) == "PAUSED"
    wait_for(
        lambda: trials(api, experiment_id)[0].runner_state == "TERMINATED", timeout=60, what="trial stop"
    )
    assert trial_state(trials(api, experiment_id)[0]) == "PAUSED"

    with pytest.raises(grpc.RpcError) as failure:
        api.ArchiveExperiment(experiment_pb2.ArchiveExperimentRequest(id=experiment_id))
    assert failure.value.code() == grpc.StatusCode.FAILED_PRECONDITION

    api.ActivateExperiment(experiment_pb2.ActivateExperimentRequest(id=experiment_id))
    wait_for(
        lambda: trials(api, experiment_id)[0].runner_state == "RUNNING", timeout=60, what="trial resumed"
    )
    api.CancelExperiment(experiment_pb2.CancelExperimentRequest(id=experiment_id))
    wait_state(api, experiment_id, "CANCELED", timeout=60)

    api.ArchiveExperiment(experiment_pb2.ArchiveExperimentRequest(id=experiment_id))
    assert experiment(api, experiment_id).archived
    unarchived = api.GetExperiments(experiment_pb2.GetExperimentsRequest(archived=False))
    assert unarchived.pagination.total == 0
    listed = api.GetExperiments(experiment_pb2.GetExperimentsRequest()).experiments
    assert [(e.id, e.archived) for e in listed] == [(experiment_id, True)]
    api.UnarchiveExperiment(experiment_pb2.UnarchiveExperimentRequest(id=experiment_id))
    # An ended experiment's listing row is cached; a change to it shows in the next list at once,
    # whatever the page (a different request, the same row).
    for request in (experiment_pb2.GetExperimentsRequest(), experiment_pb2.GetExperimentsRequest(limit=5)):
        listed = api.GetExperiments(request).experiments
        assert [(e.id, e.archived) for e in listed] == [(experiment_id, False)]
    api.DeleteExperiment(experiment_pb2.DeleteExperimentRequest(experiment_id=experiment_id))

    def gone() -> bool:
        try:
            experiment(api, experiment_id)
        except grpc.RpcError as exc:
            return exc.code() == grpc.StatusCode.NOT_FOUND
        return False

    wait_for(gone, timeout=60, what="experiment deleted")


def test_every_service_serves_health_and_reflection(cluster: TestCluster) -> None:
    assert cluster.record is not None
    for process in cluster.record.processes:
        assert process.grpc_address, process.name
        with grpc.insecure_channel(process.grpc_address) as channel:
            health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
            assert health.status == health_pb2.HealthCheckResponse.SERVING, process.name
            stub = reflection_pb2_grpc.ServerReflectionStub(channel)
            answers = list(
                stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
            )
            names = {s.name for s in answers[0].list_services_response.service}
            assert "grpc.health.v1.Health" in names, process.name


def test_disabling_an_agent_stops_new_placements(cluster: TestCluster) -> None:
    admin = cluster.login("admin")
    admin.DisableAgent(agent_pb2.DisableAgentRequest(agent_id="agent-1"))
    experiment_id = create(admin, config())
    wait_for(lambda: trials(admin, experiment_id), timeout=30, what="trial created")
    assert trials(admin, experiment_id)[0].runner_state == "PENDING"
    admin.EnableAgent(agent_pb2.EnableAgentRequest(agent_id="agent-1"))
    wait_state(admin, experiment_id, "COMPLETED")
    # A non-admin user may not disable agents.
    with pytest.raises(grpc.RpcError) as failure:
        cluster.login().DisableAgent(agent_pb2.DisableAgentRequest(agent_id="agent-1"))
    assert failure.value.code() == grpc.StatusCode.PERMISSION_DENIED

"""The TPE searcher as a program: its ready file, health checking, reflection, and a clean stop on
SIGTERM."""

from __future__ import annotations

import signal

from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tests.unit.custom_searcher.conftest import SearcherProcess
from tests.unit.custom_searcher.tpe_search_driver import CALL_TIMEOUT_S, SearchDriver, tpe_spec

SERVICE = "cairn.searcher.v1.SearcherService"


def test_the_ready_file_names_the_process_and_its_port(fresh_tpe_searcher: SearcherProcess) -> None:
    assert fresh_tpe_searcher.ready["pid"] == fresh_tpe_searcher.process.pid
    assert fresh_tpe_searcher.ready["grpc_port"] > 0
    assert set(fresh_tpe_searcher.ready) == {"pid", "grpc_port"}
    folder = fresh_tpe_searcher.log_path.parent
    assert sorted(p.name for p in folder.iterdir()) == ["ready.json", "searcher.log"]  # no partial file


def test_health_and_reflection_answer(tpe_searcher: SearcherProcess) -> None:
    health = health_pb2_grpc.HealthStub(tpe_searcher.channel)
    for service in ("", SERVICE):
        answer = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=CALL_TIMEOUT_S)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING

    reflection = reflection_pb2_grpc.ServerReflectionStub(tpe_searcher.channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    answers = list(reflection.ServerReflectionInfo(iter([request]), timeout=CALL_TIMEOUT_S))
    names = {s.name for s in answers[0].list_services_response.service}
    assert {SERVICE, "grpc.health.v1.Health"} <= names


def test_sigterm_stops_it_cleanly(fresh_tpe_searcher: SearcherProcess) -> None:
    driver = SearchDriver(fresh_tpe_searcher.stub, tpe_spec())
    driver.start()  # with a live session
    assert fresh_tpe_searcher.terminate() == 0
    log = fresh_tpe_searcher.log()
    assert "signal received signal=SIGTERM" in log
    assert "stopped" in log


def test_sigint_stops_it_too(fresh_tpe_searcher: SearcherProcess) -> None:
    fresh_tpe_searcher.process.send_signal(signal.SIGINT)
    assert fresh_tpe_searcher.process.wait(timeout=15) == 0

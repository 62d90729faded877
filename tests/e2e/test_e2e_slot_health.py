"""A GPU that fails, as the whole cluster sees it. No GPU fails on purpose (and this machine has
none), so an agent of two CUDA slots is spoken on the master's real agent stream, enrolled as the
local cluster enrols its agents, and says what a real agent's GPU health watcher says (its
NVML side is tested in tests/unit/agent/test_agent_gpu_health.py): slot 1 had Xid 79.

The stock `det slot list` shows the slot disabled (Determined's slot has no field for health),
Cairn's API gives the reason, /metrics counts it, the WebUI's slot map shows it with the reason;
`det slot enable` puts it back; the same fault reported again after a reconnect is not acted on
twice, and a new fault on the live stream takes the slot out again.
"""

from __future__ import annotations

import json
import queue
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests

from cairn.agent.v1 import agent_pb2 as apb
from cairn.agent.v1 import agent_pb2_grpc
from cairn.api.v1 import agent_enrolment_pb2 as epb
from cairn.api.v1 import agent_pb2 as api_agent_pb2
from cairn.metadata_keys import AGENT_CREDENTIAL_KEY, CLUSTER_TOKEN_KEY
from tests.e2e.test_e2e_webui import Browser, _log_in, browser_on, expect
from tests.support.cluster import AuthedStub, TestCluster
from tests.support.gpu_slots import ECC, XID_79, gpu_slots
from tests.support.polling import wait_for

pytestmark = pytest.mark.timeout(300)

AGENT = "gpu-sim"


def slots(fault: tuple[str, int] | None) -> list[apb.Slot]:
    return gpu_slots(AGENT, fault, faulty="1")


class GpuAgentStream:
    """The agent's side of one Connect stream: Hello, then whatever the test sends, with a
    heartbeat every second of silence."""

    def __init__(self, cluster: TestCluster, credential: str, fault: tuple[str, int] | None) -> None:
        self.outgoing: queue.SimpleQueue[apb.AgentMessage | None] = queue.SimpleQueue()
        hello = apb.Hello(
            agent_id=AGENT, version="sim", resource_pool="default", hostname=AGENT, slots=slots(fault)
        )
        self.outgoing.put(apb.AgentMessage(hello=hello))
        self._closed = threading.Event()
        self._heart = threading.Thread(target=self._beat, daemon=True)
        stub = agent_pb2_grpc.AgentServiceStub(cluster.channel)
        self.call = stub.Connect(
            iter(self.outgoing.get, None), metadata=((AGENT_CREDENTIAL_KEY, credential),)
        )
        first = next(self.call)
        assert first.WhichOneof("msg") == "welcome", first
        self._heart.start()

    def _beat(self) -> None:
        seq = 0
        while not self._closed.wait(1.0):
            seq += 1
            self.outgoing.put(apb.AgentMessage(heartbeat=apb.Heartbeat(seq=seq)))

    def send(self, message: apb.AgentMessage) -> None:
        self.outgoing.put(message)

    def close(self) -> None:
        self._closed.set()
        self.outgoing.put(None)
        self.call.cancel()


@pytest.fixture
def gpu_agent(cluster: TestCluster) -> Iterator[Callable[[tuple[str, int] | None], GpuAgentStream]]:
    assert cluster.record is not None
    made = cluster.raw_stub().CreateAgentJoinToken(
        epb.CreateAgentJoinTokenRequest(agent_id=AGENT),
        metadata=((CLUSTER_TOKEN_KEY, cluster.record.cluster_token),),
    )
    credential = (
        agent_pb2_grpc.AgentServiceStub(cluster.channel)
        .Enrol(apb.EnrolRequest(agent_id=AGENT, join_token=made.token))
        .credential
    )
    streams: list[GpuAgentStream] = []

    def connect(fault: tuple[str, int] | None) -> GpuAgentStream:
        for old in streams:
            old.close()
        streams.append(GpuAgentStream(cluster, credential, fault))
        return streams[-1]

    yield connect
    for stream in streams:
        stream.close()


@pytest.fixture
def ui(cluster: TestCluster, tmp_path: Path) -> Iterator[Browser]:
    yield from browser_on(cluster, tmp_path)


def slot_of(api: AuthedStub, slot_id: str) -> api_agent_pb2.Slot:
    agent = api.GetAgent(api_agent_pb2.GetAgentRequest(agent_id=AGENT)).agent
    return agent.slots[slot_id]


def det_slot(det_admin: Callable[..., str], slot_id: str) -> dict[str, object]:
    listed = json.loads(det_admin("slot", "list", "--json"))
    (found,) = [s for s in listed if s["agent_id"] == AGENT and s["slot_id"] == slot_id]
    return dict(found)


def unhealthy_gauge(cluster: TestCluster) -> float:
    assert cluster.record is not None
    assert cluster.record.master_http_url
    text = requests.get(f"{cluster.record.master_http_url.rstrip('/')}/metrics", timeout=30).text
    (value,) = re.findall(r"^cairn_slots_unhealthy (\S+)$", text, re.M)
    return float(value)


def test_a_failed_gpu_is_out_of_service_everywhere_until_an_admin_enables_it(
    cluster: TestCluster,
    gpu_agent: Callable[[tuple[str, int] | None], GpuAgentStream],
    det_admin: Callable[..., str],
    api: AuthedStub,
    ui: Browser,
) -> None:
    fault_at = int(time.time())
    stream = gpu_agent((XID_79, fault_at))
    wait_for(lambda: slot_of(api, "1").unhealthy == XID_79, timeout=30, what="the fault to be acted on")
    assert det_slot(det_admin, "1")["enabled"] is False
    assert det_slot(det_admin, "0")["enabled"] is True
    assert slot_of(api, "1").device.brand == "NVIDIA H200"
    assert unhealthy_gauge(cluster) == 1

    b, page = ui, ui.page
    b.goto("/cluster")
    _log_in(b)
    box = page.locator(f"section[aria-label='Slots of agent {AGENT}'] li.slot").nth(1)
    expect(box).to_have_attribute("data-slot-state", "unhealthy")
    expect(box).to_contain_text(XID_79)

    det_admin("slot", "enable", AGENT, "1")
    assert (slot_of(api, "1").unhealthy, det_slot(det_admin, "1")["enabled"]) == ("", True)
    assert unhealthy_gauge(cluster) == 0
    expect(box).to_have_attribute("data-slot-state", "free")  # the page's own polling

    # The agent reconnects; its Hello still carries the fault the admin has seen to.
    stream = gpu_agent((XID_79, fault_at))
    time.sleep(1)
    assert (slot_of(api, "1").unhealthy, det_slot(det_admin, "1")["enabled"]) == ("", True)

    # A new fault, on the live stream.
    stream.send(apb.AgentMessage(slot_report=apb.SlotReport(slots=slots((ECC, fault_at + 60)))))
    wait_for(lambda: slot_of(api, "1").unhealthy == ECC, timeout=30, what="the second fault to be acted on")
    assert det_slot(det_admin, "1")["enabled"] is False
    expect(box).to_contain_text(ECC)

"""The audit trail's edge (servicers/audit_methods.py, servicers/audit_interceptor.py).

The method table is generated from the services' descriptors: every method must come out READ,
CHANGE or REPORT (a new RPC that does not fails here, naming it), and the named exceptions must
name real methods of the kind they claim. The interceptor runs in front of the master's real
servicers and authentication, over a real gRPC server and in process as the REST gateway calls
it: it records who, what, from where and how each change ended, refusals included, and nothing
for reads."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor import Descriptor
from google.protobuf.message import Message

from cairn.api.v1 import api_pb2, api_pb2_grpc, auth_pb2, experiment_pb2, rbac_pb2, run_pb2, trial_pb2
from services.common.interceptors import AuthInterceptor
from services.common.local_calls import LocalCallError, LocalCalls
from services.common.server import ServiceServer, start_server
from services.master.domain.audit import events
from services.master.domain.audit.events import AuditRecord
from services.master.domain.identity.auth import AuthService
from services.master.servicers.api.service import CairnServicer
from services.master.servicers.audit_interceptor import AuditInterceptor
from services.master.servicers.audit_methods import GRPC_ONLY, READS_BY_POST, REPORTS, Kind, method_table
from services.master.servicers.auth import PUBLIC_METHODS, master_authenticator
from tests.unit.master.domain.harness import Master
from tests.unit.master.servicer_double import api_deps

TABLE = method_table()
API = "/cairn.api.v1.Cairn/"
GATEWAY_KEY = "per-boot-key"


def test_every_method_is_classified() -> None:
    unclassified = sorted(entry.full_name for entry in TABLE.values() if entry.kind is None)
    assert unclassified == [], (
        "classify these for the audit trail: a POST/PUT/PATCH/DELETE rule is a change, GET a read; "
        "else name them in servicers/audit_methods.py (READS_BY_POST, REPORTS, GRPC_ONLY)"
    )


def test_the_named_exceptions_are_real_methods_of_their_kind() -> None:
    by_name = {entry.name: entry for entry in TABLE.values() if entry.full_name.startswith("cairn.api.v1.")}
    for name in READS_BY_POST:
        assert by_name[name].route.startswith("POST "), name
        assert by_name[name].kind is Kind.READ
    for name in REPORTS:
        assert by_name[name].route and not by_name[name].route.startswith("GET "), name
        assert by_name[name].kind is Kind.REPORT
    for full_name, kind in GRPC_ONLY.items():
        entry = TABLE[f"/{full_name}"]
        assert entry.route == "" and entry.kind is kind


def test_every_verb_but_get_is_a_change_and_names_are_unique() -> None:
    audited = [entry for entry in TABLE.values() if entry.audited]
    assert len({entry.name for entry in audited}) == len(audited)
    for entry in TABLE.values():
        if entry.route.startswith(("PUT ", "PATCH ", "DELETE ")):
            assert entry.kind in (Kind.CHANGE, Kind.REPORT), entry.name
    for must in ("CreateExperiment", "KillExperiment", "DeleteExperiment", "PostUser", "PatchUser", "Login"):
        assert TABLE[API + must].kind is Kind.CHANGE
    assert TABLE["/cairn.agent.v1.AgentService/Connect"].kind is Kind.CHANGE


def _filled(descriptor: Descriptor, depth: int = 0) -> Message:
    """A request with every string and integer field set, one message deep: "s3cr3t" in every
    string (passwords and tokens among them)."""
    from google.protobuf import message_factory

    message = message_factory.GetMessageClass(descriptor)()
    for field in descriptor.fields:
        if field.message_type is not None:
            if (
                depth == 0
                and not field.is_repeated
                and not field.message_type.full_name.startswith("google.")
            ):
                getattr(message, field.name).CopyFrom(_filled(field.message_type, 1))
            continue
        value: Any
        if field.type == field.TYPE_STRING:
            value = "s3cr3t"
        elif field.type in (field.TYPE_INT32, field.TYPE_INT64, field.TYPE_UINT32, field.TYPE_UINT64):
            value = 7
        else:
            continue
        if field.is_repeated:
            getattr(message, field.name).append(value)
        else:
            setattr(message, field.name, value)
    return message


def test_targets_name_objects_and_never_a_secret() -> None:
    for entry in TABLE.values():
        if not entry.audited:
            continue
        method = entry.full_name.rsplit("/", 1)[1]
        service = entry.full_name.rsplit("/", 1)[0]
        descriptor = next(
            m.input_type for s in _services() if s.full_name == service for m in s.methods if m.name == method
        )
        for key, _ in entry.targets.of(_filled(descriptor)):
            assert not any(word in key for word in ("password", "token", "secret", "key")), (entry.name, key)
    kill = TABLE[API + "KillExperiment"].targets.of(experiment_pb2.KillExperimentRequest(id=5))
    assert kill == (("experiment_id", "5"),)
    patch = TABLE[API + "PatchExperiment"].targets.of(
        experiment_pb2.PatchExperimentRequest(experiment=experiment_pb2.PatchExperiment(id=9))
    )
    assert patch == (("experiment_id", "9"),)
    many = TABLE[API + "KillExperiments"].targets.of(
        run_pb2.BulkExperimentsRequest(experiment_ids=list(range(1, 15)), project_id=2)
    )
    assert many[:3] == (("experiment_ids", "1"), ("experiment_ids", "2"), ("experiment_ids", "3"))
    assert ("experiment_ids", "…+4") in many and len(many) <= 16
    # A role given: to whom, which role, where (each assignment of the list).
    assignment = rbac_pb2.RoleAssignment(role=rbac_pb2.Role(role_id=5), scope_workspace_id=2)
    assigned = TABLE[API + "AssignRoles"].targets.of(
        rbac_pb2.AssignRolesRequest(
            user_role_assignments=[rbac_pb2.UserRoleAssignment(user_id=3, role_assignment=assignment)]
        )
    )
    assert assigned == (("user_id", "3"), ("role_id", "5"), ("scope_workspace_id", "2"))
    # Determined's searches of groups and roles are POSTs that change nothing.
    assert TABLE[API + "GetGroups"].kind is Kind.READ and TABLE[API + "ListRoles"].kind is Kind.READ


def _services() -> list[Any]:
    from services.master.servicers.audit_methods import SERVICES

    return list(SERVICES)


# ---- the interceptor in front of the master's servicers ----


@dataclass
class Audited:
    records: list[AuditRecord]
    local: LocalCalls
    server: ServiceServer
    channel: grpc.Channel

    def rest(self, name: str, request: Message, token: str = "", client: str = "10.9.8.7") -> Any:
        """A call as the REST gateway makes it, in process, for an HTTP client at `client`."""
        metadata = (("authorization", f"Bearer {token}"),) if token else ()
        return self.local.unary(API + name, request, metadata, timeout_s=10, peer=f"http:{client}")

    def grpc(
        self, name: str, request: Message, response: type[Message], metadata: tuple[Any, ...] = ()
    ) -> Any:
        call = self.channel.unary_unary(
            API + name,
            request_serializer=type(request).SerializeToString,
            response_deserializer=response.FromString,
        )
        return call(request, metadata=metadata, timeout=10)

    def last(self) -> AuditRecord:
        return self.records[-1]


@pytest.fixture
def audited(master: Master) -> Iterator[Audited]:
    auth = AuthService(master.ctx.db, 3600)
    api = CairnServicer(api_deps(master, auth=auth))
    records: list[AuditRecord] = []

    def register(server: Any) -> list[str]:
        api_pb2_grpc.add_CairnServicer_to_server(api, server)
        return [api_pb2.DESCRIPTOR.services_by_name["Cairn"].full_name]

    interceptors = [
        AuditInterceptor(records.append, GATEWAY_KEY),
        AuthInterceptor(
            master_authenticator(auth, None, GATEWAY_KEY, grants=master.grant_cache()), PUBLIC_METHODS
        ),
    ]
    # One thread: each call runs where the one before ran, so a leaked principal would show.
    server = start_server(
        "audit-test", register, host="127.0.0.1", port=0, interceptors=interceptors, max_workers=1
    )
    try:
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            yield Audited(records, LocalCalls(register, interceptors), server, channel)
    finally:
        server.server.stop(grace=0)


def _login(audited: Audited, username: str) -> str:
    reply = audited.rest("Login", auth_pb2.LoginRequest(username=username, password=""))
    return str(reply.token)


def test_logins_are_recorded_failed_ones_under_the_name_given(audited: Audited) -> None:
    _login(audited, "admin")
    ok = audited.last()
    assert (ok.method, ok.outcome, ok.actor, ok.username) == ("Login", "OK", events.USER, "admin")
    assert ok.user_id is not None and ("user_id", str(ok.user_id)) in ok.targets
    assert (ok.address, ok.transport) == ("10.9.8.7", "rest")

    with pytest.raises(LocalCallError):
        audited.rest("Login", auth_pb2.LoginRequest(username="admin", password="wrong"), client="10.0.0.66")
    failed = audited.last()
    assert (failed.outcome, failed.actor, failed.username, failed.user_id) == (
        "UNAUTHENTICATED",
        events.ANONYMOUS,
        "admin",
        None,
    )
    assert failed.address == "10.0.0.66" and failed.error
    assert all("wrong" not in value for _, value in failed.targets)

    with pytest.raises(LocalCallError):
        audited.rest("Login", auth_pb2.LoginRequest(username="x" * 5000, password=""))
    assert len(audited.last().username) == events.MAX_USERNAME

    token = _login(audited, "admin")
    audited.rest("Logout", auth_pb2.LogoutRequest(), token)
    assert (audited.last().method, audited.last().username, audited.last().outcome) == (
        "Logout",
        "admin",
        "OK",
    )


def test_refusals_are_recorded_and_reads_are_not(audited: Audited) -> None:
    token = _login(audited, "determined")  # not an admin
    before = len(audited.records)
    me = audited.grpc(
        "GetMe", auth_pb2.GetMeRequest(), auth_pb2.GetMeResponse, (("authorization", f"Bearer {token}"),)
    )
    assert me.user.username == "determined"
    assert len(audited.records) == before  # a read: nothing recorded

    with pytest.raises(grpc.RpcError) as denied:
        audited.grpc(
            "PostUser",
            auth_pb2.PostUserRequest(user=auth_pb2.User(username="newbie"), password="hunter2"),
            auth_pb2.PostUserResponse,
            (("authorization", f"Bearer {token}"),),
        )
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
    record = audited.last()
    assert (record.method, record.outcome, record.username, record.actor) == (
        "PostUser",
        "PERMISSION_DENIED",
        "determined",
        events.USER,
    )
    assert record.targets == (("username", "newbie"),)
    assert (record.address, record.transport) == ("127.0.0.1", "grpc")

    # Next call on the same server thread, without credentials: refused by authentication, and
    # recorded as nobody's (the previous caller does not leak into it).
    with pytest.raises(grpc.RpcError):
        audited.grpc(
            "KillExperiment",
            experiment_pb2.KillExperimentRequest(id=3),
            experiment_pb2.KillExperimentResponse,
        )
    refused = audited.last()
    assert (refused.method, refused.outcome, refused.actor, refused.username) == (
        "KillExperiment",
        "UNAUTHENTICATED",
        events.ANONYMOUS,
        "",
    )
    assert refused.targets == (("experiment_id", "3"),)

    # Trial code's reports are never recorded, however they end.
    before = len(audited.records)
    with pytest.raises(grpc.RpcError):
        audited.grpc(
            "ReportTrialProgress",
            trial_pb2.ReportTrialProgressRequest(trial_id=1),
            trial_pb2.ReportTrialProgressResponse,
        )
    assert len(audited.records) == before


def test_a_worker_process_forwards_its_clients_address_with_its_key(audited: Audited) -> None:
    forwarded = ("x-forwarded-for", "6.6.6.6, 10.1.1.1")  # what the client claimed, then its address
    for key, expected in ((GATEWAY_KEY, ("10.1.1.1", "rest")), ("guessed", ("127.0.0.1", "grpc"))):
        with pytest.raises(grpc.RpcError):
            audited.grpc(
                "Login",
                auth_pb2.LoginRequest(username="nobody-here", password=""),
                auth_pb2.LoginResponse,
                (forwarded, ("x-cairn-gateway-key", key)),
            )
        assert (audited.last().address, audited.last().transport) == expected

"""Which calls the audit trail records, and what of each request it keeps: a table of every method
the master serves, generated from the services' descriptors, never listed by hand.

A method is a READ (nothing to record), a CHANGE (recorded, whoever calls and however it ends) or
a REPORT (a change the training machinery makes as it runs, not recorded). The proto decides:
every method with a `google.api.http` rule whose routes are all GETs is a READ; any other verb
(POST, PUT, PATCH, DELETE) makes a CHANGE. The exceptions are named below with their reason:
POSTs that only read (searches and previews, whose filters do not fit a query string), and the
REPORTs. Methods without an http rule (the agents' and the HTTP workers' services) are classified
in GRPC_ONLY. A method in none of these is unclassified: tests fail on it
(tests/unit/master/test_master_audit_methods.py), and until then it is recorded as a CHANGE.

What trial code's calls leave in the trail. Trial code reports as it trains: metrics, progress,
checkpoints, searcher operations, allocation signals, log lines, its run's metadata, and an
unmanaged run's state and heartbeats (PatchTrial). Those are the trial's own data, stored with it
already, and at a report every few seconds per trial they would swamp the trail, so they are
REPORTs and never recorded, whoever sends them (an unmanaged run sends them with a user's session).
Anything else trial code may call with its allocation's token (PatchCheckpoints, and every change
it is refused) is recorded like anyone's, its actor being its allocation.

Targets: the objects a request names, read from its fields by name: `id`, and every field named
`..._id(s)`, `..._uuid(s)`, `..._name(s)`, `..._num`, `username`, `name`, `resource_pool`, at the
top of the request and one message below it, and in a list of messages at its top down to two
levels below each (AssignRolesRequest: each assignment's user_id or group_id, role_id and
scope_workspace_id; at most MAX_REPEATED of a list) (PatchExperimentRequest.experiment.id is
`experiment_id`, the agent's hello.agent_id `agent_id`); a plain `id` is named after the collection
its route puts it in (POST /api/v1/experiments/{id}/kill: `experiment_id`). A successful call's
answer adds the ids of the objects it holds (CreateExperimentResponse.experiment.id:
`experiment_id`, a login's user: `user_id`), so a create names what it created. Never a password,
token, secret or key, whatever the field's name ends with.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from google.api import annotations_pb2  # type: ignore[import-untyped]
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor, ServiceDescriptor
from google.protobuf.message import Message

from cairn.agent.v1 import agent_pb2
from cairn.api.v1 import api_pb2
from cairn.gateway.v1 import gateway_pb2


class Kind(enum.Enum):
    READ = "read"
    CHANGE = "change"
    REPORT = "report"


API = "cairn.api.v1.Cairn"
AGENT_SERVICE = "cairn.agent.v1.AgentService"
GATEWAY_SERVICE = "cairn.gateway.v1.GatewayService"

# POST routes that change nothing: their requests carry filters too large for a query string.
READS_BY_POST = frozenset(
    {
        "SearchRuns",  # Determined's run search (POST /api/v1/runs, a filter in the body)
        "SearchExperiments",  # the same for experiments (POST /api/v1/experiments-search)
        "PreviewHPSearch",  # what a config's search would create, created nowhere
        # Determined's searches of groups and roles (POST /api/v1/groups/search, /roles/search...).
        "GetGroups",
        "ListRoles",
        "SearchRolesAssignableToScope",
        "GetRolesByID",
    }
)

# Changes the training machinery makes as it runs, not recorded (the module's docstring says why).
REPORTS = frozenset(
    {
        # Metrics, progress and the runner's state, every few seconds per trial.
        "ReportTrialMetrics",
        "ReportTrialMetricsBatch",
        "ReportTrialTrainingMetrics",
        "ReportTrialValidationMetrics",
        "ReportTrialProgress",
        "PostTrialRunnerMetadata",
        # The searcher's operations on its own trial, and the checkpoints it saved.
        "ReportTrialSearcherEarlyExit",
        "CompleteTrialSearcherValidation",
        "ReportCheckpoint",
        # An allocation's lifecycle, as its own processes say it.
        "AckAllocationPreemptionSignal",
        "NotifyAllocationExiting",
        "AllocationReady",
        "IdleNotebook",
        # A run starting to report, its metadata (core.train.set_metadata), its alerts
        # (context.alert), its log lines (Determined's log shipper).
        "RunPrepareForReporting",
        "PostRunMetadata",
        "PostWebhookEventData",
        "ShipTaskLogs",
        # An unmanaged run's state and heartbeat, every few seconds while it runs.
        "PatchTrial",
    }
)

# Methods without an http rule, by full name.
GRPC_ONLY: Mapping[str, Kind] = {
    # An agent's stream: recorded as it opens (or is refused), with its agent id.
    f"{AGENT_SERVICE}/Connect": Kind.CHANGE,
    # An agent's enrolment with a join token or the enrolment secret (never recorded), with the id
    # it asked to be.
    f"{AGENT_SERVICE}/Enrol": Kind.CHANGE,
    f"{AGENT_SERVICE}/FetchTaskContext": Kind.READ,
    # The HTTP port's worker processes asking the master's process: the changes users make
    # through them arrive on the public API and are recorded there.
    f"{GATEWAY_SERVICE}/ResolveProxy": Kind.READ,
    f"{GATEWAY_SERVICE}/Health": Kind.READ,
    f"{GATEWAY_SERVICE}/Metrics": Kind.READ,
    f"{GATEWAY_SERVICE}/Stream": Kind.READ,
}

SERVICES: tuple[ServiceDescriptor, ...] = (
    api_pb2.DESCRIPTOR.services_by_name["Cairn"],
    agent_pb2.DESCRIPTOR.services_by_name["AgentService"],
    gateway_pb2.DESCRIPTOR.services_by_name["GatewayService"],
)

# ---- targets ----

_TARGET_NAMES = frozenset({"id", "ids", "uuid", "name", "username", "resource_pool"})
_TARGET_SUFFIXES = ("_id", "_ids", "_uuid", "_uuids", "_name", "_names", "_num")
_NEVER = ("password", "token", "secret", "key")
# Nested fields named by their parent: experiment.id is experiment_id, template.name template_name.
_NAMED_BY_PARENT = frozenset({"id", "ids", "uuid", "name"})
MAX_VALUE = 128
MAX_REPEATED = 10
MAX_TARGETS = 16


def _is_target(field: FieldDescriptor) -> bool:
    name = field.name
    if any(word in name for word in _NEVER):
        return False
    if field.type in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP, FieldDescriptor.TYPE_BYTES):
        return False
    if field.type in (FieldDescriptor.TYPE_BOOL, FieldDescriptor.TYPE_ENUM):
        return False
    return name in _TARGET_NAMES or name.endswith(_TARGET_SUFFIXES)


def _value_text(value: Any) -> str:
    text = str(value)
    return text if len(text) <= MAX_VALUE else text[: MAX_VALUE - 1] + "…"


# A reader of one field: appends the (key, value) pairs it names in a message to a list (no
# generators: this runs on every audited call).
Reader = Callable[[Message, list[tuple[str, str]]], None]


def _reader(key: str, field: FieldDescriptor) -> Reader:
    name = field.name
    if field.is_repeated:

        def repeated(message: Message, found: list[tuple[str, str]]) -> None:
            values = getattr(message, name)
            for value in values[:MAX_REPEATED]:
                found.append((key, _value_text(value)))
            if len(values) > MAX_REPEATED:
                found.append((key, f"…+{len(values) - MAX_REPEATED}"))

        return repeated

    def single(message: Message, found: list[tuple[str, str]]) -> None:
        value = getattr(message, name)
        if value:
            found.append((key, _value_text(value)))

    return single


def _nested(field: FieldDescriptor, readers: list[Reader]) -> Reader:
    name = field.name

    def nested(message: Message, found: list[tuple[str, str]]) -> None:
        if message.HasField(name):
            inner = getattr(message, name)
            for read in readers:
                read(inner, found)

    return nested


def _repeated_nested(field: FieldDescriptor, readers: list[Reader]) -> Reader:
    name = field.name

    def repeated_nested(message: Message, found: list[tuple[str, str]]) -> None:
        for inner in getattr(message, name)[:MAX_REPEATED]:
            for read in readers:
                read(inner, found)

    return repeated_nested


def _readers(descriptor: Descriptor, parent: str = "", id_key: str = "id", below: int = 0) -> list[Reader]:
    """The readers of a message's targets: its own fields, one message below the request, and in
    a list of messages at the top (AssignRolesRequest's user_role_assignments) `below` levels
    further down (each one's role_assignment.role.role_id)."""
    readers: list[Reader] = []
    for field in descriptor.fields:
        if _is_target(field):
            if parent and field.name in _NAMED_BY_PARENT:
                key = f"{parent}_{field.name}"
            elif not parent and field.name == "id":
                key = id_key
            else:
                key = field.name
            readers.append(_reader(key, field))
        elif (
            field.message_type is not None
            and not field.message_type.full_name.startswith("google.")
            and not any(word in field.name for word in _NEVER)
        ):
            if not parent and field.is_repeated:
                inner = _readers(field.message_type, parent=field.name, below=2)
                if inner:
                    readers.append(_repeated_nested(field, inner))
            elif not field.is_repeated and (not parent or below > 0):
                inner = _readers(field.message_type, parent=field.name, below=max(below - 1, 0))
                if inner:
                    readers.append(_nested(field, inner))
    return readers


@dataclass(frozen=True)
class TargetFields:
    """What a request message names, read by its field readers (made once per message type)."""

    readers: tuple[Reader, ...]

    def of(self, message: Message, before: tuple[tuple[str, str], ...] = ()) -> tuple[tuple[str, str], ...]:
        """`before`, then the pairs `message` names that it does not hold yet, MAX_TARGETS in all."""
        if not self.readers:
            return before
        named: list[tuple[str, str]] = []
        for read in self.readers:
            read(message, named)
        if not before and len(named) <= MAX_TARGETS:
            return tuple(named)
        found = list(before)
        for pair in named:
            if len(found) >= MAX_TARGETS:
                break
            if pair not in found:
                found.append(pair)
        return tuple(found)


def target_fields(descriptor: Descriptor, id_key: str = "id") -> TargetFields:
    """The targets of a request of type `descriptor`, its plain `id` named `id_key`."""
    return TargetFields(tuple(_readers(descriptor, id_key=id_key)))


def created_fields(descriptor: Descriptor) -> TargetFields:
    """What an answer of type `descriptor` names by id: the object a call created (or changed),
    `experiment_id` of CreateExperimentResponse.experiment, `user_id` of a login's user."""
    readers: list[Reader] = []
    for field in descriptor.fields:
        inner = field.message_type
        if inner is None or field.is_repeated or inner.full_name.startswith("google."):
            continue
        for name in ("id", "uuid"):
            found = inner.fields_by_name.get(name)
            if found is not None and _is_target(found) and not found.is_repeated:
                readers.append(_nested(field, [_reader(f"{field.name}_{name}", found)]))
    return TargetFields(tuple(readers))


_ID_IN_PATH = re.compile(r"/([a-z][a-z_-]*)/\{id\}")


def id_key(route: str) -> str:
    """What a request's plain `id` is called: after the collection its route puts it in
    ("/api/v1/experiments/{id}/kill": experiment_id); plain `id` without one."""
    found = _ID_IN_PATH.search(route)
    if found is None:
        return "id"
    collection = found.group(1).replace("-", "_")
    if collection.endswith("ies"):
        collection = collection[:-3] + "y"
    elif collection.endswith("s"):
        collection = collection[:-1]
    return f"{collection}_id"


# ---- the table ----


@dataclass(frozen=True)
class MethodEntry:
    name: str  # "KillExperiment"
    full_name: str  # "cairn.api.v1.Cairn/KillExperiment"
    kind: Kind | None  # None: unclassified (recorded as a CHANGE)
    route: str  # "POST /api/v1/experiments/{id}/kill"; "" without an http rule
    targets: TargetFields
    # What a successful answer names by id (the object created).
    created: TargetFields

    @property
    def audited(self) -> bool:
        return self.kind in (Kind.CHANGE, None)


def http_routes(method: MethodDescriptor) -> list[tuple[str, str]]:
    """(verb, path template) of each route of `method`'s google.api.http rule; none without one."""
    options = method.GetOptions()
    if not options.HasExtension(annotations_pb2.http):
        return []
    routes: list[tuple[str, str]] = []
    rules = [options.Extensions[annotations_pb2.http]]
    while rules:
        rule = rules.pop(0)
        pattern = rule.WhichOneof("pattern")
        if pattern == "custom":
            routes.append((rule.custom.kind.upper(), rule.custom.path))
        elif pattern is not None:
            routes.append((pattern.upper(), getattr(rule, pattern)))
        rules.extend(rule.additional_bindings)
    return routes


def classify(method: MethodDescriptor) -> Kind | None:
    full_name = f"{method.containing_service.full_name}/{method.name}"
    if full_name in GRPC_ONLY:
        return GRPC_ONLY[full_name]
    routes = http_routes(method)
    if not routes:
        return None
    if method.name in REPORTS:
        return Kind.REPORT
    if method.name in READS_BY_POST:
        return Kind.READ
    return Kind.READ if all(verb == "GET" for verb, _ in routes) else Kind.CHANGE


def method_table(services: Iterable[ServiceDescriptor] = SERVICES) -> dict[str, MethodEntry]:
    """Every method of `services` by its path on the wire ("/cairn.api.v1.Cairn/KillExperiment")."""
    table: dict[str, MethodEntry] = {}
    for service in services:
        for method in service.methods:
            full_name = f"{service.full_name}/{method.name}"
            routes = http_routes(method)
            route = f"{routes[0][0]} {routes[0][1]}" if routes else ""
            table[f"/{full_name}"] = MethodEntry(
                name=method.name,
                full_name=full_name,
                kind=classify(method),
                route=route,
                targets=target_fields(method.input_type, id_key(route)),
                created=created_fields(method.output_type),
            )
    return table

"""What the agent presents to the master, and how it gets a credential of its own.

The agent enrols once (AgentService.Enrol) with a one-time join token (--join-token-file) or the
cluster's enrolment secret (--enrolment-secret-file) and keeps the credential it receives in its
work dir (`agent-credential.json`, mode 0600, beside its containers' state, itself 0700), with the
agent id it was issued to. From then on, restarts included, it presents that credential on every
call (metadata `x-cairn-agent-credential`) and nothing else; the join token or secret is needed
again only if the master stops taking the credential (a replaced database; a revoked agent that an
admin admits again with a new join token made for its id): the session then enrols once more, with
the enrolment secret or a join token it has not used.

Without a credential and without a way to enrol, the agent presents the cluster token: a master in
compatibility mode (`--agent-auth cluster_token`) takes it, one in the default mode refuses it
saying how to enrol.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from cairn.agent.v1 import agent_pb2 as apb
from cairn.agent.v1 import agent_pb2_grpc
from cairn.client.token_store import write_private_file
from cairn.metadata_keys import AGENT_CREDENTIAL_KEY, CLUSTER_TOKEN_KEY
from cairn.wire import channel_with
from services.common.logging import get_logger

log = get_logger(__name__)

CREDENTIAL_FILE = "agent-credential.json"
# An answer to Enrol that retrying can change: the master (or its database) is away for now.
TRANSIENT = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
ENROL_TIMEOUT_S = 30.0


class EnrolmentRefused(Exception):
    """The master will not enrol this agent with what it was given; the message says why."""


@dataclass(frozen=True)
class StoredCredential:
    credential: str
    # The join token it was got with (its sha256): used, so never presented again.
    join_token_sha256: str = ""


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class CredentialStore:
    """The agent's credential on disk: one JSON file, owner-only, replaced atomically."""

    def __init__(self, work_dir: Path) -> None:
        self.path = work_dir / CREDENTIAL_FILE

    def load(self, agent_id: str) -> StoredCredential | None:
        """The stored credential of `agent_id`; None when there is none, or it is another id's (the
        work dir was used under another --agent-id: that credential cannot speak as this one)."""
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("ignoring an unreadable agent credential", path=str(self.path), error=str(exc))
            return None
        if not isinstance(data, dict) or not isinstance(data.get("credential"), str):
            log.warning("ignoring an agent credential file that holds none", path=str(self.path))
            return None
        if data.get("agent_id") != agent_id:
            log.warning(
                "the stored credential is another agent id's; it cannot speak as this one",
                stored_for=data.get("agent_id"),
                agent_id=agent_id,
            )
            return None
        return StoredCredential(str(data["credential"]), str(data.get("join_token_sha256") or ""))

    def save(self, agent_id: str, credential: str, join_token_sha256: str = "") -> None:
        # Written as the CLI writes its logins: a temporary file created 0600 (never readable by
        # anyone else), synced, then renamed over the old one.
        record = {"agent_id": agent_id, "credential": credential, "join_token_sha256": join_token_sha256}
        write_private_file(self.path, json.dumps(record))

    def forget(self) -> None:
        self.path.unlink(missing_ok=True)


class AgentAuth:
    """The agent's credentials toward the master: its own (stored), the means to get one, and
    the cluster token for masters in compatibility mode."""

    def __init__(
        self,
        *,
        agent_id: str,
        store: CredentialStore,
        join_token: str | None = None,
        enrolment_secret: str | None = None,
        cluster_token: str | None = None,
    ) -> None:
        self.agent_id = agent_id
        self._store = store
        self._join_token = join_token
        self._enrolment_secret = enrolment_secret
        self._cluster_token = cluster_token
        self._lock = threading.Lock()
        stored = store.load(agent_id)
        self._credential = stored.credential if stored is not None else None
        # The join token this agent enrolled with, if it is the one it was given again: used once,
        # it would only be refused (a restart keeps its --join-token-file).
        self._used_join_token = stored.join_token_sha256 if stored is not None else ""

    @property
    def has_credential(self) -> bool:
        return self._credential is not None

    @property
    def can_enrol(self) -> bool:
        """Whether there is a means to enrol with that this agent has not used up."""
        fresh_token = bool(self._join_token) and _sha256(self._join_token or "") != self._used_join_token
        return fresh_token or bool(self._enrolment_secret)

    def describe(self) -> str:
        if self._credential is not None:
            return "its own credential"
        if self._join_token:
            return "a join token (to enrol)"
        if self._enrolment_secret:
            return "the enrolment secret (to enrol)"
        if self._cluster_token:
            return "the cluster token (compatibility mode)"
        return "nothing (a master without a cluster token, in compatibility mode)"

    def metadata(self) -> list[tuple[str, str]]:
        """What every call presents: the credential alone once there is one."""
        with self._lock:
            if self._credential is not None:
                return [(AGENT_CREDENTIAL_KEY, self._credential)]
        if self._cluster_token and not (self._join_token or self._enrolment_secret):
            return [(CLUSTER_TOKEN_KEY, self._cluster_token)]
        return []

    def drop_credential(self) -> None:
        """The master does not take the stored credential any more: enrol again on the next try."""
        with self._lock:
            self._credential = None
        self._store.forget()

    def enrol(self, stub: agent_pb2_grpc.AgentServiceStub) -> None:
        """Enrol with the join token or enrolment secret and keep the credential. Raises
        EnrolmentRefused when the master says no, grpc.RpcError when it could not be asked."""
        if self._join_token and _sha256(self._join_token) != self._used_join_token:
            request = apb.EnrolRequest(agent_id=self.agent_id, join_token=self._join_token)
            means = "a join token"
        elif self._enrolment_secret:
            request = apb.EnrolRequest(agent_id=self.agent_id, enrolment_secret=self._enrolment_secret)
            means = "the enrolment secret"
        else:
            raise EnrolmentRefused("no join token or enrolment secret to enrol with")
        try:
            answer = stub.Enrol(request, timeout=ENROL_TIMEOUT_S)
        except grpc.RpcError as exc:
            if exc.code() in TRANSIENT:
                raise
            raise EnrolmentRefused(
                f"the master refused to enrol agent {self.agent_id} with {means} ({exc.code().name}): "
                f"{exc.details()}"
            ) from None
        if answer.agent_id != self.agent_id or not answer.credential:
            raise EnrolmentRefused(f"the master's answer to the enrolment is not for agent {self.agent_id}")
        used = _sha256(request.join_token) if request.join_token else ""
        self._store.save(self.agent_id, answer.credential, used)
        with self._lock:
            self._credential = answer.credential
            self._used_join_token = used or self._used_join_token
        log.info("enrolled: the agent holds a credential of its own", agent_id=self.agent_id, means=means)

    def channel(
        self, target: str, credentials: grpc.ChannelCredentials | None = None
    ) -> tuple[grpc.Channel, grpc.Channel]:
        """(the channel to call through, the underlying one to close): every call carries what
        `metadata()` says at the time it is made, so a credential got later is presented at once."""
        _, base = channel_with(target, [], credentials=credentials)
        return grpc.intercept_channel(base, _CurrentMetadata(self.metadata)), base


class _CurrentMetadata(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    def __init__(self, metadata: Callable[[], list[tuple[str, str]]]) -> None:
        self._metadata = metadata

    def _details(self, details: Any) -> Any:
        return details._replace(metadata=list(details.metadata or []) + self._metadata())

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation: Callable[..., Any], details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)

    def intercept_stream_stream(self, continuation: Callable[..., Any], details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)

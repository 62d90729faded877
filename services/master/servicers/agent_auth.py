"""Who is calling the agent service (cairn.agent.v1.AgentService), by the master's `--agent-auth`:

- `credentials` (the default): an agent presents its own credential (metadata
  `x-cairn-agent-credential`, issued by Enrol) and is known by the agent id it was issued to
  (Principal.agent_id); the cluster token opens nothing here, it is for the control plane's services.
- `cluster_token` (compatibility, for clusters whose agents still join the old way): an agent's own
  credential works as above, and the cluster token (or nothing, on a master without one) is also
  taken, as the agent id the hello names, so long as that id holds no credential
  (agent_credentials.check_may_speak_as: an enrolled or revoked id is refused to it).

Enrol itself needs no metadata: the join token or enrolment secret it carries is its credential.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

import grpc

from services.common.interceptors import AuthError
from services.common.metadata import AGENT_CREDENTIAL_KEY, CLUSTER_TOKEN_KEY, Metadata, metadata_value
from services.common.principal import Principal
from services.master.configuration.config_file import AGENT_AUTH_MODES
from services.master.domain.identity import agent_credentials
from services.master.domain.kernel.errors import DatabaseUnavailable, PermissionDenied, Unauthenticated
from services.master.domain.kernel.outage import ride_out
from services.master.store.db import Database

AGENT_SERVICE = "/cairn.agent.v1.AgentService/"
ENROL_METHOD = AGENT_SERVICE + "Enrol"

AgentAuthenticate = Callable[[str, Metadata], Principal]


def agent_authenticator(db: Database, mode: str, cluster_token: str | None) -> AgentAuthenticate:
    if mode not in AGENT_AUTH_MODES:
        raise ValueError(f"agent auth mode {mode!r} is not one of {', '.join(AGENT_AUTH_MODES)}")

    def by_credential(credential: str) -> Principal:
        def look_up() -> str:
            with db.read() as s:
                return agent_credentials.agent_of_credential(s, credential)

        try:
            agent_id = ride_out(look_up, what="checking an agent's credential")
        except Unauthenticated as exc:
            raise AuthError(str(exc)) from None
        except PermissionDenied as exc:
            raise AuthError(str(exc), code=grpc.StatusCode.PERMISSION_DENIED) from None
        except DatabaseUnavailable as exc:
            raise AuthError(str(exc), code=grpc.StatusCode.UNAVAILABLE) from None
        return Principal(username=f"agent {agent_id}", agent_id=agent_id)

    def authenticate(method: str, metadata: Metadata) -> Principal:
        if method == ENROL_METHOD:
            return Principal(username="agent")  # not yet anyone's: the request names its id
        credential = metadata_value(metadata, AGENT_CREDENTIAL_KEY)
        if credential:
            return by_credential(credential)
        if mode == "credentials":
            raise AuthError(
                "this master admits agents by credentials of their own (--agent-auth credentials): enrol "
                "the agent with a join token (--join-token-file; an admin makes one with `cairn agent "
                "join-token create`) or the enrolment secret (--enrolment-secret-file); the cluster token "
                "is for the control plane's services"
            )
        if not cluster_token:
            return Principal(internal=True, username="agent")
        presented = metadata_value(metadata, CLUSTER_TOKEN_KEY) or ""
        if not hmac.compare_digest(presented.encode(), cluster_token.encode()):
            raise AuthError(
                f"agents must present their own credential ({AGENT_CREDENTIAL_KEY}) or, on this master "
                f"in compatibility mode, the cluster token ({CLUSTER_TOKEN_KEY})"
            )
        return Principal(internal=True, username="agent")

    return authenticate

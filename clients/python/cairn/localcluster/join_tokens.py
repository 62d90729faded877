"""A join token for each agent the local cluster starts: asked of the master with the cluster
token (the one public call it opens, CreateAgentJoinToken), bound to the agent's id, and handed to
the agent in an owner-only file (--join-token-file). The agent enrols with it once and keeps the
credential it receives in its work dir, so a restarted agent (the watchdog's, `cluster up` on a
partly running cluster) presents that and needs the token no more."""

from __future__ import annotations

from pathlib import Path

import grpc

from cairn.api.v1 import agent_enrolment_pb2, api_pb2_grpc
from cairn.client.errors import CairnError
from cairn.client.token_store import write_private_file
from cairn.metadata_keys import CLUSTER_TOKEN_KEY

# Long enough for a slow start (the agent enrols at once); short enough not to matter once used.
JOIN_TOKEN_LIFETIME_S = 3600


class JoinTokenError(CairnError):
    pass


def write_join_token(
    *, master_address: str, cluster_token: str, ca_file: str | None, agent_id: str, path: Path
) -> None:
    """Ask the master for a join token bound to `agent_id` and write it to `path` (mode 0600)."""
    if ca_file:
        credentials = grpc.ssl_channel_credentials(root_certificates=Path(ca_file).read_bytes())
        channel = grpc.secure_channel(master_address, credentials)
    else:
        channel = grpc.insecure_channel(master_address)
    try:
        answer = api_pb2_grpc.CairnStub(channel).CreateAgentJoinToken(
            agent_enrolment_pb2.CreateAgentJoinTokenRequest(
                agent_id=agent_id, expires_in_seconds=JOIN_TOKEN_LIFETIME_S
            ),
            metadata=((CLUSTER_TOKEN_KEY, cluster_token),),
            timeout=30,
        )
    except grpc.RpcError as exc:
        raise JoinTokenError(
            f"the master did not make a join token for {agent_id} ({exc.code().name}): {exc.details()}"
        ) from None
    finally:
        channel.close()
    write_private_file(path, answer.token + "\n")

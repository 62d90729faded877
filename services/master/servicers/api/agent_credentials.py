"""Agents' own credentials on the public API: join tokens, the enrolment secret, the credentials
issued and revocation (domain/identity/agent_credentials.py, domain/scheduling/agent_revocation.py).
Agents themselves enrol on the agent service (servicers/agent_stream.py)."""

from __future__ import annotations

import grpc

from cairn.api.v1 import agent_enrolment_pb2 as epb
from services.master.domain.identity import agent_credentials
from services.master.domain.identity.agent_credentials import CredentialInfo, JoinTokenInfo
from services.master.domain.scheduling import agent_revocation
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.api.convert import ts
from services.master.servicers.errors import rpc


def join_token_message(info: JoinTokenInfo) -> epb.AgentJoinToken:
    return epb.AgentJoinToken(
        id=info.id,
        agent_id=info.agent_id or "",
        created_by=info.created_by,
        created_at=ts(info.created_at),
        expires_at=ts(info.expires_at),
        used_at=ts(info.used_at),
        used_by_agent=info.used_by_agent or "",
    )


def credential_message(info: CredentialInfo) -> epb.AgentCredential:
    return epb.AgentCredential(
        agent_id=info.agent_id,
        issued_at=ts(info.issued_at),
        issued_with=info.issued_with,
        revoked=info.revoked_at is not None,
        revoked_at=ts(info.revoked_at),
        revoked_by=info.revoked_by,
    )


class AgentCredentialsApi(ServicerBase):
    @rpc
    def CreateAgentJoinToken(
        self, request: epb.CreateAgentJoinTokenRequest, context: grpc.ServicerContext
    ) -> epb.CreateAgentJoinTokenResponse:
        # A user (the domain checks for an admin) or the cluster itself (its cluster token).
        issued = agent_credentials.create_join_token(
            self.ctx, self.caller(context), request.agent_id, request.expires_in_seconds
        )
        return epb.CreateAgentJoinTokenResponse(
            join_token=join_token_message(issued.info), token=issued.token
        )

    @rpc
    def GetAgentJoinTokens(
        self, request: epb.GetAgentJoinTokensRequest, context: grpc.ServicerContext
    ) -> epb.GetAgentJoinTokensResponse:
        found = agent_credentials.list_join_tokens(self.ctx, self.user(context), request.show_inactive)
        return epb.GetAgentJoinTokensResponse(join_tokens=[join_token_message(info) for info in found])

    @rpc
    def RotateAgentEnrolmentSecret(
        self, request: epb.RotateAgentEnrolmentSecretRequest, context: grpc.ServicerContext
    ) -> epb.RotateAgentEnrolmentSecretResponse:
        rotated = agent_credentials.rotate_enrolment_secret(self.ctx, self.user(context))
        return epb.RotateAgentEnrolmentSecretResponse(
            secret=rotated.secret, created_at=ts(rotated.created_at)
        )

    @rpc
    def GetAgentCredentials(
        self, request: epb.GetAgentCredentialsRequest, context: grpc.ServicerContext
    ) -> epb.GetAgentCredentialsResponse:
        found = agent_credentials.list_credentials(self.ctx, self.user(context))
        return epb.GetAgentCredentialsResponse(credentials=[credential_message(info) for info in found])

    @rpc
    def RevokeAgent(
        self, request: epb.RevokeAgentRequest, context: grpc.ServicerContext
    ) -> epb.RevokeAgentResponse:
        revocation = agent_revocation.revoke(self.ctx, self.user(context), request.agent_id)
        return epb.RevokeAgentResponse(
            credential=credential_message(revocation.credential),
            lost_allocation_ids=revocation.lost_allocation_ids,
        )

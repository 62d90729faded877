"""Access tokens (Determined's /api/v1/tokens): create, list, change and revoke."""

from __future__ import annotations

import grpc

from cairn.api.v1 import common_pb2, token_pb2
from services.master.domain.identity import access_tokens
from services.master.servicers.api import convert
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.errors import rpc

R = token_pb2.GetAccessTokensRequest
SORT_NAMES = {
    R.SORT_BY_UNSPECIFIED: "id",
    R.SORT_BY_USER_ID: "user_id",
    R.SORT_BY_EXPIRY: "expiry",
    R.SORT_BY_CREATED_AT: "created_at",
    # Every token listed is an access token: sorting by type keeps the default order.
    R.SORT_BY_TOKEN_TYPE: "id",
    R.SORT_BY_REVOKED: "revoked",
    R.SORT_BY_DESCRIPTION: "description",
}


def token_info(info: access_tokens.TokenInfo) -> token_pb2.TokenInfo:
    return token_pb2.TokenInfo(
        id=info.id,
        user_id=info.user_id,
        expiry=convert.ts(info.expiry),
        created_at=convert.ts(info.created_at),
        token_type=token_pb2.TOKEN_TYPE_ACCESS_TOKEN,
        revoked=info.revoked,
        description=info.description,
    )


class TokensApi(ServicerBase):
    @rpc
    def PostAccessToken(
        self, request: token_pb2.PostAccessTokenRequest, context: grpc.ServicerContext
    ) -> token_pb2.PostAccessTokenResponse:
        token, token_id = access_tokens.create(
            self.ctx,
            self.user(context),
            request.user_id,
            request.lifespan if request.HasField("lifespan") else None,
            request.description,
        )
        return token_pb2.PostAccessTokenResponse(token=token, token_id=token_id)

    @rpc
    def GetAccessTokens(
        self, request: token_pb2.GetAccessTokensRequest, context: grpc.ServicerContext
    ) -> token_pb2.GetAccessTokensResponse:
        query = access_tokens.TokenQuery(
            token_ids=tuple(request.token_ids),
            username=request.username,
            show_inactive=request.show_inactive,
            sort_by=SORT_NAMES.get(request.sort_by, "id"),
            descending=request.order_by == common_pb2.ORDER_BY_DESC,
            offset=request.offset,
            limit=request.limit,
        )
        rows, page = access_tokens.listing(self.ctx, self.user(context), query)
        return token_pb2.GetAccessTokensResponse(
            token_info=[token_info(row) for row in rows], pagination=convert.pagination(page)
        )

    @rpc
    def PatchAccessToken(
        self, request: token_pb2.PatchAccessTokenRequest, context: grpc.ServicerContext
    ) -> token_pb2.PatchAccessTokenResponse:
        info = access_tokens.patch(
            self.ctx,
            self.deps.auth,
            self.user(context),
            request.token_id,
            request.description if request.HasField("description") else None,
            request.set_revoked,
        )
        return token_pb2.PatchAccessTokenResponse(token_info=token_info(info))

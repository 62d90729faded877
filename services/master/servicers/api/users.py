"""Users: list, read, create, change, set a password (Determined's /api/v1/users)."""

from __future__ import annotations

import grpc

from cairn.api.v1 import auth_pb2, common_pb2
from services.master.domain.identity import users
from services.master.servicers.api import convert
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.errors import rpc

R = auth_pb2.GetUsersRequest
SORT_NAMES = {
    R.SORT_BY_UNSPECIFIED: "id",
    R.SORT_BY_DISPLAY_NAME: "display_name",
    R.SORT_BY_USER_NAME: "username",
    R.SORT_BY_ADMIN: "admin",
    R.SORT_BY_ACTIVE: "active",
    R.SORT_BY_MODIFIED_TIME: "modified_at",
    R.SORT_BY_NAME: "name",
    R.SORT_BY_LAST_AUTH_TIME: "last_auth_at",
    # Every Cairn user is local: sorting by "remote" keeps the default order.
    R.SORT_BY_REMOTE: "id",
}


def _changes(user: auth_pb2.PatchUser) -> users.UserChanges:
    return users.UserChanges(
        username=user.username if user.HasField("username") else None,
        admin=user.admin if user.HasField("admin") else None,
        active=user.active if user.HasField("active") else None,
        display_name=user.display_name if user.HasField("display_name") else None,
        password=user.password if user.HasField("password") else None,
        is_hashed=user.is_hashed,
        remote=user.remote if user.HasField("remote") else None,
        agent_user_group=convert.agent_user_group_request(user),
    )


class UsersApi(ServicerBase):
    @rpc
    def GetUsers(
        self, request: auth_pb2.GetUsersRequest, context: grpc.ServicerContext
    ) -> auth_pb2.GetUsersResponse:
        self.user(context)
        query = users.UserQuery(
            name=request.name,
            active=request.active if request.HasField("active") else None,
            admin=request.admin if request.HasField("admin") else None,
            sort_by=SORT_NAMES.get(request.sort_by, "id"),
            descending=request.order_by == common_pb2.ORDER_BY_DESC,
            offset=request.offset,
            limit=request.limit,
        )
        rows, page = users.listing(self.ctx.db, query)
        return auth_pb2.GetUsersResponse(
            users=[convert.user(u) for u in rows], pagination=convert.pagination(page)
        )

    @rpc
    def GetUser(
        self, request: auth_pb2.GetUserRequest, context: grpc.ServicerContext
    ) -> auth_pb2.GetUserResponse:
        self.user(context)
        return auth_pb2.GetUserResponse(user=convert.user(users.get(self.ctx.db, request.user_id)))

    @rpc
    def GetUserByUsername(
        self, request: auth_pb2.GetUserByUsernameRequest, context: grpc.ServicerContext
    ) -> auth_pb2.GetUserByUsernameResponse:
        self.user(context)
        info = users.get_by_username(self.ctx.db, request.username)
        return auth_pb2.GetUserByUsernameResponse(user=convert.user(info))

    @rpc
    def PostUser(
        self, request: auth_pb2.PostUserRequest, context: grpc.ServicerContext
    ) -> auth_pb2.PostUserResponse:
        u = request.user
        wanted = users.UserChanges(
            username=u.username,
            admin=u.admin,
            # As in Determined: the flag as sent (its clients send true).
            active=u.active,
            display_name=u.display_name,
            remote=u.remote,
            agent_user_group=convert.agent_user_group_request(u),
        )
        info = users.create(
            self.ctx.db,
            self.user(context),
            wanted,
            request.password,
            request.is_hashed,
            allow_root_agent_user=self.ctx.settings.allow_root_agent_user,
            allow_remote=self.ctx.settings.oidc is not None,
        )
        return auth_pb2.PostUserResponse(user=convert.user(info))

    @rpc
    def PatchUser(
        self, request: auth_pb2.PatchUserRequest, context: grpc.ServicerContext
    ) -> auth_pb2.PatchUserResponse:
        info = users.patch(
            self.ctx.db,
            self.deps.auth,
            self.user(context),
            request.user_id,
            _changes(request.user),
            allow_root_agent_user=self.ctx.settings.allow_root_agent_user,
        )
        # Cached replies show the owner's name (GetExperiments' rows): a rename must not wait for
        # the next unit of work to reach them (users are changed outside one).
        self.ctx.data_changed()
        return auth_pb2.PatchUserResponse(user=convert.user(info))

    @rpc
    def SetUserPassword(
        self, request: auth_pb2.SetUserPasswordRequest, context: grpc.ServicerContext
    ) -> auth_pb2.SetUserPasswordResponse:
        info = users.set_password(
            self.ctx.db, self.deps.auth, self.user(context), request.user_id, request.password
        )
        return auth_pb2.SetUserPasswordResponse(user=convert.user(info))

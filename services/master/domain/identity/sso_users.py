"""Signing in through single sign-on (OpenID Connect: gateway/oidc_routes.py runs the flow and
hands over what the provider's verified ID token says): the user, created on first login when the
master may provision users, its group memberships from the token's groups claim, and a session.

Rules, each the safe one:
  * Single sign-on logs in only remote users (`users.remote`: created here, or by an admin with
    `det user create --remote`). A claim that names a local account ("admin", "determined", any
    user with a password) is refused: a provider's claim never takes over a local account.
  * Unknown users are created only with `auto_provision_users`; otherwise refused, saying so. A
    new user joins the groups every new user joins (default_groups), as any other new user.
  * Groups: the claim is authoritative for memberships of the groups it can name, and names only
    groups that already exist in Cairn. Groups are never created from a claim: which groups exist,
    and the roles they hold, stay an admin's decision, and a provider (or a user who can edit their
    own groups there) cannot make Cairn store names without bound. Memberships of existing groups
    are synced as Determined syncs them: added for groups in the claim, removed for groups not in
    it, except the groups every new user joins (those hold what every user may do). A token
    without the claim leaves memberships as they are (a provider not set up to send groups must
    not strip them).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from services.master.domain.identity import default_groups
from services.master.domain.identity.auth import AuthService, UserInfo, user_info
from services.master.domain.identity.users import check_sso_username
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.errors import NotFound, PermissionDenied
from services.master.store import models

# The most group names one token's claim may list (more is refused, not cut: a cut list would
# drop memberships at random), and the longest name looked at (a group's name column).
MAX_CLAIMED_GROUPS = 256
MAX_GROUP_NAME = 255


@dataclass(frozen=True)
class SsoIdentity:
    """What a verified ID token says of its user, bounded (gateway/oidc_flow.py checks the sizes)."""

    username: str
    display_name: str = ""
    # None: the token has no groups claim (memberships left as they are).
    groups: tuple[str, ...] | None = None


@dataclass(frozen=True)
class SsoLogin:
    token: str
    user: UserInfo
    created: bool
    groups: tuple[str, ...]  # the Cairn groups the user is a member of after the login


def sign_in(ctx: MasterContext, auth: AuthService, who: SsoIdentity, *, auto_provision: bool) -> SsoLogin:
    """Log `who` in: PermissionDenied for a local account, an inactive user, or an unknown user
    without auto-provisioning; InvalidArgument for a username Cairn cannot take."""
    username = check_sso_username(who.username)
    if who.groups is not None and len(who.groups) > MAX_CLAIMED_GROUPS:
        raise PermissionDenied(f"the groups claim lists {len(who.groups)} groups, over {MAX_CLAIMED_GROUPS}")
    display_name = who.display_name[:255]
    with ctx.unit_of_work() as w:
        s = w.session
        user = s.scalar(select(models.User).where(models.User.username == username))
        created = False
        if user is None:
            if not auto_provision:
                raise NotFound(
                    f"user {username!r} does not exist in Cairn and the master does not create users "
                    "on first login (oidc.auto_provision_users): an admin creates it with "
                    "`det user create --remote`"
                )
            now = utcnow()
            # No password: a remote user signs in through the provider only.
            user = models.User(
                username=username,
                password_hash="",
                admin=False,
                active=True,
                display_name=display_name,
                created_at=now,
                modified_at=now,
                remote=True,
            )
            s.add(user)
            s.flush()
            default_groups.join(s, user.id)
            created = True
        elif not user.remote:
            raise PermissionDenied(
                f"user {username!r} is a local account, not one that signs in through single sign-on"
            )
        elif not user.active:
            raise PermissionDenied("user is not active")
        elif display_name and user.display_name != display_name:
            user.display_name = display_name
            user.modified_at = utcnow()
        if who.groups is not None and _sync_groups(s, user.id, who.groups):
            w.later(ctx.access_changed)
        token = auth.open_session(s, user)
        member_of = tuple(
            s.scalars(
                select(models.UserGroup.name)
                .join(models.UserGroupMember, models.UserGroupMember.group_id == models.UserGroup.id)
                .where(models.UserGroupMember.user_id == user.id)
                .order_by(models.UserGroup.name)
            )
        )
        return SsoLogin(token=token, user=user_info(user), created=created, groups=member_of)


def _sync_groups(s: Session, user_id: int, claimed: tuple[str, ...]) -> bool:
    """Memberships of existing groups as the claim says (module docstring); whether any changed."""
    names = {name for name in claimed if 0 < len(name) <= MAX_GROUP_NAME}
    named = s.scalars(
        select(models.UserGroup.id).where(
            models.UserGroup.name.in_(names), models.UserGroup.joins_new_users.is_(False)
        )
    )
    wanted = set(named) if names else set()
    held = set(
        s.scalars(
            select(models.UserGroupMember.group_id)
            .join(models.UserGroup, models.UserGroup.id == models.UserGroupMember.group_id)
            .where(models.UserGroupMember.user_id == user_id, models.UserGroup.joins_new_users.is_(False))
        )
    )
    to_add = wanted - held
    to_remove = held - wanted
    for gid in sorted(to_add):
        s.add(models.UserGroupMember(group_id=gid, user_id=user_id))
    if to_remove:
        s.execute(
            delete(models.UserGroupMember).where(
                models.UserGroupMember.user_id == user_id, models.UserGroupMember.group_id.in_(to_remove)
            )
        )
    return bool(to_add or to_remove)

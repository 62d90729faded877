"""The groups a new user joins: those marked `joins_new_users` (the built-in "everyone" of
migration 0025, through which a default cluster gives every user what every user could do before
roles existed). Kept apart from groups.py so user creation (auth.py, users.py) needs nothing else of
the groups."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.master.store import models


def join(s: Session, user_id: int) -> None:
    """Make a just-created user a member of every group new users join (in its transaction)."""
    for group_id in s.scalars(select(models.UserGroup.id).where(models.UserGroup.joins_new_users.is_(True))):
        s.add(models.UserGroupMember(group_id=group_id, user_id=user_id))

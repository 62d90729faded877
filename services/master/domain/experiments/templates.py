"""Config templates (Determined's templates): create, replace, rename and delete them, and read one
for an experiment that names it.

A template is a named partial experiment config in a workspace. Its config is checked before it is
stored, as far as a partial config can be (config/partial.py): a template that could never take part
in a valid experiment is refused when it is written, not when an experiment first uses it. Anyone
may read and use every template and create one (Determined's basic rules); changing or deleting one
takes its owner or an admin.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session

from services.common.principal import Principal
from services.master.domain.config.bounds import MAX_CONFIG_DEPTH, MAX_CONFIG_TEXT_CHARS
from services.master.domain.config.partial import validate_partial_config
from services.master.domain.identity import access, scopes
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
)
from services.master.domain.reads import templates as reads
from services.master.store import models

# The name column's width.
MAX_NAME_CHARS = 255
# A template is a config fragment: far below this in practice, and every experiment using it
# stores a copy of what it merges in. Bounded like an experiment config (config/bounds.py).
MAX_CONFIG_BYTES = MAX_CONFIG_TEXT_CHARS


def checked_name(name: str, field: str = "name") -> str:
    """A name Determined's client can put in a URL path segment and a person can read."""
    if not name.strip():
        raise InvalidArgument(f"{field}: must not be empty")
    if len(name) > MAX_NAME_CHARS:
        raise InvalidArgument(f"{field}: at most {MAX_NAME_CHARS} characters (got {len(name)})")
    if "/" in name:
        raise InvalidArgument(f"{field}: must not contain '/' (it names the template in URL paths)")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise InvalidArgument(f"{field}: must not contain control characters")
    return name


def _depth(value: Any) -> int:
    """How deeply `value` nests, counted without recursion (the bound is checked before the value
    is walked any further)."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, level = pending.pop()
        deepest = max(deepest, level)
        if level > MAX_CONFIG_DEPTH:
            break
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        pending.extend((child, level + 1) for child in children)
    return deepest


def checked_config(value: Any, field: str = "config") -> dict[str, Any]:
    """A template config: a mapping of experiment-config fields, bounded, each valid as far as a
    partial config can be. InvalidArgument naming every problem otherwise."""
    if value is None:
        raise InvalidArgument(f"{field}: required (a mapping of experiment config fields)")
    if not isinstance(value, dict):
        kind = "a list" if isinstance(value, list) else f"a {type(value).__name__}"
        raise InvalidArgument(f"{field}: must be a mapping of experiment config fields, not {kind}")
    if _depth(value) > MAX_CONFIG_DEPTH:
        raise InvalidArgument(f"{field}: nests deeper than {MAX_CONFIG_DEPTH} levels")
    try:
        size = len(json.dumps(value, allow_nan=False))
    except ValueError:
        raise InvalidArgument(f"{field}: numbers must be finite") from None
    if size > MAX_CONFIG_BYTES:
        raise InvalidArgument(f"{field}: at most {MAX_CONFIG_BYTES} bytes as JSON (got {size})")
    problems = validate_partial_config(value)
    if problems:
        raise InvalidArgument("; ".join(f"{field}.{problem}" for problem in problems))
    return value


def check_can_change(
    s: Session,
    principal: Principal,
    template: models.Template,
    permission: Permission = Permission.UPDATE_TEMPLATES,
) -> None:
    """Not found unless the caller may see the template; refused unless they may do `permission`
    to it (identity/access.py)."""
    access.check_object(
        s,
        principal,
        permission,
        scopes.of_template(template),
        [template.user_id],
        f"template {template.name!r}",
        view=Permission.VIEW_TEMPLATES,
    )


def _load(w: Work, name: str) -> models.Template:
    found = w.session.get(models.Template, name)
    if found is None:
        raise NotFound(f"template: no template named {name!r}")
    return found


def _usable_workspace(w: Work, workspace_id: int) -> int:
    wanted = workspace_id or models.UNCATEGORIZED_WORKSPACE_ID
    workspace = w.session.get(models.Workspace, wanted)
    if workspace is None or workspace.state:
        raise NotFound(f"workspace_id: no workspace {wanted}")
    if workspace.archived:
        raise FailedPrecondition(f"workspace_id: workspace {workspace.name!r} is archived")
    return wanted


def create(
    ctx: MasterContext, w: Work, principal: Principal, name: str, config: Any, workspace_id: int = 0
) -> models.Template:
    """A new template owned by the caller; `workspace_id` 0 is the default workspace."""
    checked_name(name)
    if principal.user_id is None:
        raise PermissionDenied("only a user can create templates")
    workspace = _usable_workspace(w, workspace_id)
    access.check_readable(
        principal, Permission.VIEW_WORKSPACE, workspace, f"workspace_id: workspace {workspace}", w.session
    )
    access.check(
        principal,
        Permission.CREATE_TEMPLATES,
        workspace,
        f"create templates in workspace {workspace}",
        w.session,
    )
    checked = checked_config(config)
    if w.session.get(models.Template, name) is not None:
        raise AlreadyExists(f"name: a template named {name!r} already exists")
    now = utcnow()
    template = models.Template(
        name=name,
        config=checked,
        workspace_id=workspace,
        user_id=principal.user_id,
        created_at=now,
        updated_at=now,
    )
    w.session.add(template)
    w.session.flush()
    return template


def replace_config(
    ctx: MasterContext, w: Work, principal: Principal, name: str, config: Any
) -> models.Template:
    """The template's config replaced whole (Determined's PatchTemplateConfig)."""
    template = _load(w, name)
    check_can_change(w.session, principal, template)
    template.config = checked_config(config)
    template.updated_at = utcnow()
    return template


def put(
    ctx: MasterContext, w: Work, principal: Principal, name: str, config: Any, workspace_id: int = 0
) -> models.Template:
    """Create the template in the default workspace, or replace its config (Determined's upsert,
    which cannot choose a workspace)."""
    checked_name(name)
    if workspace_id:
        raise InvalidArgument(
            "workspace_id: cannot be set when putting a template; create it in a workspace instead"
        )
    if w.session.get(models.Template, name) is None:
        return create(ctx, w, principal, name, config)
    return replace_config(ctx, w, principal, name, config)


def rename(
    ctx: MasterContext, w: Work, principal: Principal, old_name: str, new_name: str
) -> models.Template:
    template = _load(w, old_name)
    check_can_change(w.session, principal, template)
    checked_name(new_name, "new_name")
    if new_name == old_name:
        return template
    if w.session.get(models.Template, new_name) is not None:
        raise AlreadyExists(f"new_name: a template named {new_name!r} already exists")
    # The name is the primary key: change it in place, then read the row under its new name.
    w.session.execute(
        update(models.Template)
        .where(models.Template.name == old_name)
        .values(name=new_name, updated_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    w.session.expunge(template)
    return _load(w, new_name)


def delete(ctx: MasterContext, w: Work, principal: Principal, name: str) -> None:
    template = _load(w, name)
    check_can_change(w.session, principal, template, Permission.DELETE_TEMPLATES)
    w.session.delete(template)


def config_for_experiment(ctx: MasterContext, name: str) -> dict[str, Any]:
    """The config of the template an experiment names, checked again (the schema may have moved on
    since it was stored). NotFound or InvalidArgument naming `template`."""
    if not name.strip() or len(name) > MAX_NAME_CHARS:
        raise NotFound(f"template: no template named {name!r}")
    with ctx.db.read() as s:
        config = reads.template(s, name).config
    problems = validate_partial_config(config)
    if problems:
        raise InvalidArgument(
            f"template: template {name!r} no longer fits the experiment config: " + "; ".join(problems)
        )
    return config

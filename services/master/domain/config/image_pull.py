"""A task config's image pull settings (Determined's environment.force_pull_image and
registry_auth), checked when a command, notebook, shell, TensorBoard or generic task is launched,
as Determined checks them: the Docker runtime honours them, the process runtime notes them in the
task's log and runs no image."""

from __future__ import annotations

from typing import Any

from services.master.domain.config.schema import REGISTRY_AUTH_FIELDS


def image_pull_problem(environment: dict[str, Any]) -> str | None:
    """What is wrong with the pull settings of `environment` (a config's environment section),
    naming the field; None when nothing is."""
    force = environment.get("force_pull_image")
    if force is not None and not isinstance(force, bool):
        return "config.environment.force_pull_image: must be true or false"
    auth = environment.get("registry_auth")
    if auth is None:
        return None
    if not isinstance(auth, dict):
        return f"config.environment.registry_auth: must be a mapping ({', '.join(REGISTRY_AUTH_FIELDS)})"
    for key, value in auth.items():
        if key not in REGISTRY_AUTH_FIELDS:
            return (
                f"config.environment.registry_auth.{key}: unknown field "
                f"(Docker's are {', '.join(REGISTRY_AUTH_FIELDS)})"
            )
        if value is not None and not isinstance(value, str):
            return f"config.environment.registry_auth.{key}: must be a string"
    return None

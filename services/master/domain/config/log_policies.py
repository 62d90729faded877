"""Log policies (Determined's `log_policies` in an experiment config), as a config holds them:
`{name?, pattern, action}`, the action `{type: cancel_retries | exclude_node}` or the type alone;
`actions: [...]` (several) is taken too. Checked at creation (each problem names its field) and
compiled for matching (trials/log_policies.py says what a match does)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from services.master.domain.config.messages import Problem

CANCEL_RETRIES = "cancel_retries"
EXCLUDE_NODE = "exclude_node"
ACTIONS = frozenset({CANCEL_RETRIES, EXCLUDE_NODE})

# A line is matched on its first MAX_MATCHED_CHARS characters; a pattern is no longer than that.
MAX_MATCHED_CHARS = 4096


@dataclass(frozen=True)
class LogPolicy:
    pattern: re.Pattern[str]
    actions: frozenset[str]


def _action_types(policy: dict[str, Any]) -> set[str]:
    raw: list[Any] = []
    if "action" in policy:
        raw.append(policy["action"])
    if isinstance(policy.get("actions"), list):
        raw.extend(policy["actions"])
    types = set()
    for action in raw:
        kind = action.get("type") if isinstance(action, dict) else action
        if isinstance(kind, str) and kind in ACTIONS:
            types.add(kind)
    return types


def log_policy_problems(policies: Any) -> Iterator[Problem]:
    """What is wrong with a config's `log_policies`, each naming its field. (The schema already
    says when it is not a list of objects.)"""
    if not isinstance(policies, list):
        return
    for index, policy in enumerate(policies):
        if not isinstance(policy, dict):
            continue
        field = f"log_policies[{index}]"
        pattern = policy.get("pattern")
        if not isinstance(pattern, str) or not pattern:
            yield Problem(f"{field}.pattern", "required: a regular expression")
        elif len(pattern) > MAX_MATCHED_CHARS:
            yield Problem(f"{field}.pattern", f"at most {MAX_MATCHED_CHARS} characters")
        else:
            try:
                re.compile(pattern)
            except re.error as exc:
                yield Problem(f"{field}.pattern", f"not a regular expression ({exc})")
        for key in ("action", "actions"):
            actions = policy.get(key)
            listed = actions if isinstance(actions, list) else [actions] if actions is not None else []
            for action in listed:
                kind = action.get("type") if isinstance(action, dict) else action
                if kind not in ACTIONS:
                    yield Problem(f"{field}.{key}", f"type must be one of {', '.join(sorted(ACTIONS))}")


def parse(policies: Any) -> tuple[LogPolicy, ...]:
    """The policies of a config that act (compiled); the others are left out."""
    if not isinstance(policies, list):
        return ()
    parsed = []
    for policy in policies:
        if not isinstance(policy, dict) or not isinstance(policy.get("pattern"), str):
            continue
        actions = _action_types(policy)
        if not actions:
            continue
        try:
            parsed.append(LogPolicy(re.compile(policy["pattern"]), frozenset(actions)))
        except re.error:
            continue
    return tuple(parsed)

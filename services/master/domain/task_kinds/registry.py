"""Every kind of task that is not a trial, by its TaskKind: the one place the kinds are listed.
Whatever differs between kinds is read from here (kind.py says what a description holds)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from services.master.domain.kernel.states import TaskKind
from services.master.domain.task_kinds import command, generic, notebook, shell, tensorboard
from services.master.domain.task_kinds.kind import KindDescription, Proxy

KINDS: Mapping[str, KindDescription] = MappingProxyType(
    {
        described.kind: described
        for described in (
            command.COMMAND,
            generic.GENERIC,
            notebook.NOTEBOOK,
            shell.SHELL,
            tensorboard.TENSORBOARD,
        )
    }
)


def description(kind: str) -> KindDescription:
    """The description of a kind of task that is not a trial (KeyError for any other)."""
    return KINDS[TaskKind(kind)]


def proxy_of(kind: str) -> Proxy:
    """What the proxy serves of a task of `kind`; nothing for a trial's."""
    found = KINDS.get(kind)
    return found.proxy if found is not None else Proxy.NONE

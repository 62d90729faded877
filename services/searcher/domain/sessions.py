"""The built-in searcher's table of live search sessions: the plug-in kit's session table
(cairn.searcher_plugin.sessions: sequence numbers, retried starts, restores, locks) over the
built-in methods."""

from __future__ import annotations

from cairn.searcher_plugin.sessions import SessionTable
from services.searcher.domain.factory import BuiltinSearches
from services.searcher.domain.registry import MethodRegistry


class SessionManager(SessionTable):
    def __init__(self, registry: MethodRegistry) -> None:
        super().__init__(BuiltinSearches(registry))

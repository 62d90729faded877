"""The built-in methods as the plug-in kit builds searches: new ones from a spec through the
registry, restored ones from the built-in snapshot state, and previews by simulation."""

from __future__ import annotations

from cairn.searcher_plugin.method import SearchFactory
from cairn.searcher_plugin.preview import Preview
from cairn.searcher_plugin.snapshot import Snapshot
from cairn.searcher_plugin.spec import SearchSpec
from services.searcher.domain.preview import preview
from services.searcher.domain.registry import MethodRegistry
from services.searcher.domain.searcher import Searcher
from services.searcher.domain.snapshot import SNAPSHOT_VERSION, read_state


class BuiltinSearches(SearchFactory):
    snapshot_version = SNAPSHOT_VERSION

    def __init__(self, registry: MethodRegistry) -> None:
        self.registry = registry

    def create(self, spec: SearchSpec) -> Searcher:
        return Searcher.new(spec, self.registry)

    def restore(self, snapshot: Snapshot) -> Searcher:
        return Searcher.from_state(read_state(snapshot), self.registry)

    def preview(self, spec: SearchSpec) -> Preview:
        return preview(spec, self.registry)

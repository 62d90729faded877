"""A TPE searcher for Cairn, built on Optuna's sampler and served over Cairn's SearcherService
contract by the plug-in kit (cairn.searcher_plugin), which does the sessions, snapshots' frames,
conversion, gRPC edge, health, reflection and signals.

Modules: `search` (one search: an Optuna study driven by events, and the factory the kit serves),
`state` (a search as snapshot bytes and back), `space` and `config` (the spec's two sections),
`draws` (the seeded generator), `__main__` (flags, logging, `serve`).
"""

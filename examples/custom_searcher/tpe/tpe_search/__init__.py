"""A TPE searcher for Cairn, built on Optuna's sampler, served over Cairn's SearcherService contract.

Modules, from the wire inwards: `__main__` (flags, server, signals), `server` (gRPC server with health
and reflection), `servicer` (the contract's edge), `convert` (messages to and from domain values),
`sessions` (the session table: ids, sequence numbers, locks), `search` (one search: an Optuna study
driven by events), `snapshot` (a search as JSON and back), `space` and `config` (the spec's two
sections), `draws` (the seeded generator), `events` and `actions` (what flows in and out).
"""

"""The searcher's domain: search methods, their bookkeeping and snapshots, and the session table.
Nothing here knows about gRPC."""

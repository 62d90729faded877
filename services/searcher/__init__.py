"""Cairn's searcher service: hyperparameter search sessions that turn trial events into actions
(create, stop, set target, shutdown) and answer every event with a restorable snapshot."""

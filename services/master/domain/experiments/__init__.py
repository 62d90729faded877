"""Experiments: creation from a config, edits, continuation, projects, templates and config
policies, the limits on what one config may make the master store, and the search that creates
their trials (searcher_pump.py pumps the outbox to the searcher, searcher_actions.py applies its
answers)."""

"""Talking to a Cairn master from Python.

Modules (import them directly; this package imports nothing so that `cairn.client.password` stays
free of gRPC for the master's domain code):
  address           the master's gRPC address(es): flag, $CAIRN_MASTER, default localhost:8090
  session           Session: a channel to the master with the user's token on every call
  auth              login / logout / open_session (token resolution, default login)
  token_store       the login cache (auth.json, mode 0600)
  errors            CairnError and the one-line messages for gRPC status codes
  model_definition  a context directory as CreateExperimentRequest.model_definition
  ignore_rules      .detignore / .cairnignore matching
  password          Determined-compatible client-side password hashing
"""

"""Limits on a model definition (an experiment's context directory), shared by the client that packs
it, the master that stores it and the agents that unpack it; no imports, so every side may use it."""

from __future__ import annotations

# Determined's master refuses model definitions over about 95 MiB.
DEFAULT_SIZE_LIMIT_BYTES = 96 * 1024 * 1024
# A context directory of a large repository holds a few thousand files; each one is a tar header to
# read and an inode to create on every agent that runs a trial, so the count is bounded as well as
# the bytes (the master and the agents refuse more, before unpacking anything).
MAX_MODEL_DEFINITION_FILES = 50_000

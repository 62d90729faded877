"""Cairn: an open cluster platform for deep-learning training.

This package is the client side: the generated gRPC stubs (cairn.api, cairn.agent, ...), the CLI
(cairn.cli), the Python SDK (cairn.client) and the Core API for training code (cairn.core).
"""

__version__ = "0.1.0"

# The Determined release whose REST API, experiment config and Core API Cairn implements: the master
# reports it as its version so that Determined's clients (0.38.x) compare themselves to it correctly.
DETERMINED_API_VERSION = "0.38.1"

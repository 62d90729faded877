"""Cairn: an open cluster platform for deep-learning training.

This package is the client side: the generated gRPC stubs (cairn.api, cairn.agent, ...), the CLI
(cairn.cli), the Python SDK (cairn.client) and the Core API for training code (cairn.core).
"""

__version__ = "0.1.0"

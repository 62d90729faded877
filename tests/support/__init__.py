"""Helpers shared by the test suites (database backends, clusters, polling)."""

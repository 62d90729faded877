"""Providers of dynamic agents (the provisioning contract in domain/provisioning/provider.py)."""

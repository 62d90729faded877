"""Workspaces and projects: creating, editing, archiving them, and the keys projects give their
experiments."""

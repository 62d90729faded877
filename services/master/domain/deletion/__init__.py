"""Deleting what is gone for good: experiments, workspaces and projects, each in bounded steps
run by the deferred-work loop so no one transaction grows with the data."""

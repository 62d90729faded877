"""Checkpoints and the model registry: recording what trials saved, garbage collection, and the
fence that keeps a checkpoint being deleted from being registered meanwhile."""

"""Cairn's scheduler service: a stateless, pure placement decision over the cluster state the master
sends (Determined's agent resource manager: priority scheduling, best/worst fit, preemption)."""

"""A Cairn cluster as local processes: start, wait for readiness, report, stop, sweep leftovers.

No CLI here: `cairn cluster up|down|status` (cairn.cli.cluster) is a thin layer over `supervisor`.
Modules:
  paths       where a cluster keeps its record, logs, ready files and agent work dirs
  record      cluster.json: what was started (pids, commands, ports, token)
  plan        the command line of each service
  processes   spawning in a new session, liveness, signalling process groups, log tails
  readiness   ready files and the gRPC health check
  sweep       trial processes left behind by agents
  supervisor  up / down / status
"""

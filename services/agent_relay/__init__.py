"""The agents' relay: a process in front of the master that holds the agents' streams
(relay.py says how)."""

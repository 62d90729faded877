"""The agent's gRPC edge towards the master: the Connect stream (session.py), the model definition
download, and conversions between proto messages and the agent's own types."""

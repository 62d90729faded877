"""The master's gRPC edge: one module per proto service area. Check the caller, convert, call domain."""

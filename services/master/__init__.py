"""The master: owns the database and every state machine; serves the public API and agent streams."""

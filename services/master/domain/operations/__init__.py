"""The master as its operators see it: its effective settings (redacted) and its own log."""

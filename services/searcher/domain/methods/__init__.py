"""The built-in search methods."""

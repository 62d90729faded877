"""Persistence: SQLAlchemy models, engine/session setup, Alembic migrations. No gRPC, no policy."""

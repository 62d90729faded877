"""Engine and session setup for SQLite (embedded default) and PostgreSQL, and schema migration."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def _normalise_url(url: str) -> str:
    # Users write postgres:// (Heroku style) or postgresql://; SQLAlchemy wants a known dialect.
    if url.startswith("postgres://"):
        return "postgresql+psycopg2://" + url[len("postgres://") :]
    if url.startswith("postgresql://"):
        return "postgresql+psycopg2://" + url[len("postgresql://") :]
    return url


def _tune_sqlite(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    # WAL lets readers proceed while one writer commits; busy_timeout makes writers queue, not fail.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


class Database:
    """The master's database: an engine, a session factory and transactions."""

    def __init__(self, url: str) -> None:
        self.url = _normalise_url(url)
        self.dialect = "sqlite" if self.url.startswith("sqlite") else "postgresql"
        if self.dialect == "sqlite":
            self.engine: Engine = create_engine(
                self.url, connect_args={"check_same_thread": False, "timeout": 30}, pool_pre_ping=True
            )
            event.listen(self.engine, "connect", _tune_sqlite)
        else:
            self.engine = create_engine(self.url, pool_size=16, max_overflow=32, pool_pre_ping=True)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Session]:
        """A session whose work commits together on success and rolls back on any exception."""
        with self._sessions() as session, session.begin():
            yield session

    @contextlib.contextmanager
    def read(self) -> Iterator[Session]:
        """A session for reads only."""
        with self._sessions() as session:
            yield session

    def migrate(self) -> None:
        """Bring the schema to the latest migration (idempotent)."""
        with self.engine.begin() as connection:
            cfg = Config()
            cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
            cfg.attributes["connection"] = connection
            command.upgrade(cfg, "head")

    def ping(self) -> bool:
        try:
            with self.engine.connect() as connection:
                connection.execute(text("SELECT 1"))
            return True
        except Exception:
            return False

    def dispose(self) -> None:
        self.engine.dispose()

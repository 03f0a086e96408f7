"""The tables (SQLAlchemy Core) and the engines: SQLite by default (a file in the service's folder, WAL), PostgreSQL
through the same code (``postgresql://…``, on psycopg).

``batches`` — one per create request; ``rollouts`` — one per (task, sample), its current state and attempt;
``results`` — one row per finished attempt (completed, failed, cancelled, interrupted): the results stream's events,
whose id is the SSE event id. Times are ISO-8601 strings in UTC, the same text on both databases.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine, make_url

from tackroom import ConfigError

SCHEMA_VERSION = "1"

metadata = sa.MetaData()

meta = sa.Table(
    "meta", metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.String(256), nullable=False),
)

batches = sa.Table(
    "batches", metadata,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("id", sa.String(40), nullable=False, unique=True),
    sa.Column("client", sa.String(128), nullable=False),
    sa.Column("idempotency_key", sa.String(256)),
    sa.Column("request_hash", sa.String(64), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("policy_version", sa.Integer),
    sa.Column("samples", sa.Integer, nullable=False),
    sa.Column("total", sa.Integer, nullable=False),
    sa.Column("concurrency", sa.Integer, nullable=False),
    sa.Column("config", sa.JSON, nullable=False),
    sa.Column("secrets_in_memory", sa.Boolean, nullable=False),
    sa.Column("task_load_failures", sa.JSON, nullable=False),
    sa.Column("metadata", sa.JSON, nullable=False),
    sa.Column("created_at", sa.String(40), nullable=False),
    sa.Column("updated_at", sa.String(40), nullable=False),
    sa.UniqueConstraint("client", "idempotency_key", name="uq_batches_client_key"),
)

rollouts = sa.Table(
    "rollouts", metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("batch_id", sa.String(40), sa.ForeignKey("batches.id"), nullable=False),
    sa.Column("position", sa.Integer, nullable=False),
    sa.Column("task_id", sa.String(512), nullable=False),
    sa.Column("task_path", sa.String(4096), nullable=False),
    sa.Column("task_hash", sa.String(128), nullable=False),
    sa.Column("trial_id", sa.String(512), nullable=False),
    sa.Column("sample", sa.Integer, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("policy_version", sa.Integer),
    sa.Column("result_id", sa.Integer),
    sa.Column("created_at", sa.String(40), nullable=False),
    sa.Column("started_at", sa.String(40)),
    sa.UniqueConstraint("batch_id", "position", name="uq_rollouts_batch_position"),
    sa.Index("ix_rollouts_batch_state", "batch_id", "state"),
    sa.Index("ix_rollouts_state", "state"),
)

results = sa.Table(
    "results", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("rollout_id", sa.String(64), sa.ForeignKey("rollouts.id"), nullable=False),
    sa.Column("batch_id", sa.String(40), nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("policy_version", sa.Integer),
    sa.Column("reward", sa.Float),
    sa.Column("error_class", sa.String(16)),
    sa.Column("error", sa.JSON),
    sa.Column("notes", sa.JSON, nullable=False),
    sa.Column("result", sa.JSON, nullable=False),
    sa.Column("trajectory", sa.JSON, nullable=False),
    sa.Column("finished_at", sa.String(40), nullable=False),
    sa.Index("ix_results_batch_id", "batch_id", "id"),
    sa.Index("ix_results_rollout", "rollout_id"),
)

TABLES = ("batches", "rollouts", "results")


def database_url(db: str | None, folder: Path) -> URL:
    """``--db``: a SQLAlchemy URL, or nothing for ``<folder>/serve.db``; ``postgresql://`` gets psycopg."""
    if not db:
        return make_url(f"sqlite:///{(folder / 'serve.db').resolve()}")
    try:
        url = make_url(db)
    except sa.exc.ArgumentError as exc:
        raise ConfigError(f"--db {db!r}: not a database URL (sqlite:///PATH or postgresql://USER@HOST/DB)") from exc
    if url.get_backend_name() == "postgresql" and url.get_driver_name() != "psycopg":
        url = url.set(drivername="postgresql+psycopg")
    if url.get_backend_name() not in ("sqlite", "postgresql"):
        raise ConfigError(f"--db: {url.get_backend_name()!r} is not supported; use sqlite or postgresql")
    if url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:"):
        raise ConfigError("--db: an in-memory SQLite database would lose every rollout at a restart; name a file")
    return url


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")  # readers never wait for the writer
    cursor.execute("PRAGMA synchronous=NORMAL")  # durable at each checkpoint; a crash loses no committed WAL frame
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def make_engine(url: URL) -> Engine:
    """The service's engine (reads and writes): WAL for SQLite, a small pool for PostgreSQL."""
    if url.get_backend_name() == "sqlite":
        Path(url.database or "").parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(url, connect_args={"check_same_thread": False}, pool_size=8, max_overflow=8)
        sa.event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return sa.create_engine(url, pool_size=8, max_overflow=8, pool_pre_ping=True)


def create_tables(engine: Engine) -> None:
    """Create what is missing; refuse a database made by another schema version."""
    metadata.create_all(engine)
    with engine.begin() as conn:
        found = conn.execute(sa.select(meta.c.value).where(meta.c.key == "schema_version")).scalar()
        if found is None:
            conn.execute(meta.insert().values(key="schema_version", value=SCHEMA_VERSION))
        elif found != SCHEMA_VERSION:
            raise ConfigError(f"the database holds tackroom serve schema {found}, this version uses "
                              f"{SCHEMA_VERSION}: point --db at a new database")

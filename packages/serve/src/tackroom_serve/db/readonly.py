"""Read-only SQL over the service's tables (``POST /v1/sql``): one statement, in a read-only connection and
transaction, at most ``max_rows`` rows, stopped at a deadline.

SQLite: a second engine opened ``mode=ro`` with ``PRAGMA query_only``, an authorizer that allows reading and
nothing else (no ATTACH, no PRAGMA but those that describe tables, no write), and a progress handler that interrupts
the statement at its deadline; sqlite3 runs one statement per call. PostgreSQL: connections that start
``default_transaction_read_only``, each query in ``SET TRANSACTION READ ONLY`` with a ``statement_timeout``, sent as
one prepared statement (the server refuses a second statement in it), and rolled back. The role the service connects
as still bounds what a SELECT can read (give it no superuser rights in production: a superuser may call
``pg_read_file``).
"""

from __future__ import annotations

import base64
import datetime as dt
import sqlite3
import time
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine

from tackroom_serve.models import SqlResult

SQLITE_READS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
SQLITE_SCHEMA_PRAGMAS = {"table_info", "table_xinfo", "table_list", "index_list", "index_info", "foreign_key_list"}
"""Pragmas that describe the tables, allowed when read (``PRAGMA table_info(rollouts)``), never when set."""


class SqlRefused(Exception):
    """The statement writes, fails, or runs past its deadline (HTTP 400); ``code`` says which."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _allow_reads(action: int, arg1: Any, arg2: Any, *_: Any) -> int:
    if action in SQLITE_READS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA and str(arg1).lower() in SQLITE_SCHEMA_PRAGMAS:
        return sqlite3.SQLITE_OK  # a schema pragma's argument is a table's name: it reads, never sets
    return sqlite3.SQLITE_DENY


def _sqlite_read_only(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.execute("PRAGMA query_only=ON")
    dbapi_connection.set_authorizer(_allow_reads)


def readonly_engine(url: URL) -> Engine:
    """An engine that cannot write, for the same database as ``url``."""
    if url.get_backend_name() == "sqlite":
        ro = sa.create_engine(f"sqlite:///file:{url.database}?mode=ro&uri=true",
                              connect_args={"check_same_thread": False}, pool_size=2, max_overflow=2)
        sa.event.listen(ro, "connect", _sqlite_read_only)
        return ro
    return sa.create_engine(url, pool_size=2, max_overflow=2, pool_pre_ping=True,
                            connect_args={"options": "-c default_transaction_read_only=on"})


def plain(value: Any) -> Any:
    """A cell as JSON can carry it."""
    if value is None or isinstance(value, (bool, int, float, str, list, dict)):
        return value
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode()
    return str(value)


def run_readonly(engine: Engine, query: str, *, max_rows: int, timeout_sec: float) -> SqlResult:
    """Run one SELECT; :class:`SqlRefused` for a write (``read_only``), an error (``sql_error``) or the
    deadline (``timeout``)."""
    with engine.connect() as conn:
        raw = conn.connection.driver_connection
        try:
            if engine.dialect.name == "sqlite":
                cursor = _sqlite_cursor(raw, query, timeout_sec)
            else:
                cursor = _postgres_cursor(raw, query, timeout_sec)
            columns = [d[0] for d in cursor.description or []]
            rows = cursor.fetchmany(max_rows + 1)
        except Exception as exc:
            raise _refusal(exc, timeout_sec) from None
        finally:
            if engine.dialect.name == "sqlite":
                raw.set_progress_handler(None, 0)
            raw.rollback()
    return SqlResult(columns=columns, rows=[[plain(v) for v in r] for r in rows[:max_rows]],
                     truncated=len(rows) > max_rows)


def _sqlite_cursor(raw: sqlite3.Connection, query: str, timeout_sec: float) -> Any:
    deadline = time.monotonic() + timeout_sec
    raw.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
    return raw.execute(query)


def _postgres_cursor(raw: Any, query: str, timeout_sec: float) -> Any:
    cursor = raw.cursor()
    cursor.execute("SET TRANSACTION READ ONLY")
    cursor.execute(f"SET LOCAL statement_timeout = {max(1, int(timeout_sec * 1000))}")
    cursor.execute(query.rstrip().rstrip(";"), prepare=True)  # one prepared statement: a second one is refused
    return cursor


def _refusal(exc: Exception, timeout_sec: float) -> SqlRefused:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    lowered = text.lower()
    if "interrupted" in lowered or "statement timeout" in lowered or "canceling statement" in lowered:
        return SqlRefused("timeout", f"the query ran past its {timeout_sec:g} s deadline and was stopped")
    if any(w in lowered for w in ("read-only", "readonly", "not authorized", "query_only")):
        return SqlRefused("read_only", f"only reading is allowed here: {text}")
    return SqlRefused("sql_error", text)

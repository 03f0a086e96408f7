"""Fixtures for the service's tests: a plugin manager with the test plugins, small tasks, and a throwaway PostgreSQL
cluster when Debian's server binaries are on this machine."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).parent))  # serve_testing.py (tests use --import-mode=importlib)

from serve_testing import ServeTestPlugins, word_tasks

import tackroom_app

PG_BIN = [Path("/usr/local/bin"), *sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)]


@pytest.fixture
def manager() -> tackroom_app.PluginManager:
    """Installed plugins (oracle, nop, local, test-script, ...) plus the test plugins above."""
    manager = tackroom_app.PluginManager()
    manager.register(ServeTestPlugins(), name="test:serve-plugins")
    return manager


@pytest.fixture
def tasks(tmp_path: Path) -> Path:
    """Three tasks the oracle solves (reward 1) and nop does not (reward 0)."""
    return word_tasks(tmp_path / "tasks")


# -- PostgreSQL --------------------------------------------------------------------------------------
def _pg_tool(name: str) -> Path | None:
    return next((d / name for d in PG_BIN if (d / name).is_file()), None)


def _as_postgres_user() -> list[str]:
    """initdb refuses root: as root, run the server as ``nobody`` (runuser); otherwise as ourselves."""
    if os.geteuid() != 0:
        return []
    runuser = shutil.which("runuser")
    if runuser is None:
        pytest.skip("running as root without runuser: cannot start PostgreSQL as an unprivileged user")
    return [runuser, "-u", "nobody", "--"]


@pytest.fixture(scope="session")
def postgres_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A throwaway PostgreSQL cluster on a free port, its URL (trust auth on loopback); skipped without the
    server binaries (initdb, pg_ctl)."""
    initdb, pg_ctl = _pg_tool("initdb"), _pg_tool("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.skip(f"PostgreSQL's initdb/pg_ctl are not on this machine (looked in {', '.join(map(str, PG_BIN))})")
    prefix = _as_postgres_user()
    # as root the cluster's folder must be one nobody can reach (pytest's tmp folders are root's alone)
    root = Path(tempfile.mkdtemp(prefix="tackroom-pg-")) if prefix else tmp_path_factory.mktemp("pg")
    if prefix:
        shutil.chown(root, "nobody")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = root / "data"
    subprocess.run([*prefix, str(initdb), "-D", str(data), "-A", "trust", "-U", "tackroom", "--no-sync"],
                   check=True, capture_output=True, timeout=120)
    subprocess.run([*prefix, str(pg_ctl), "-D", str(data), "-l", str(root / "log"), "-w", "-t", "60", "-o",
                    f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off", "start"],
                   check=True, capture_output=True, timeout=120)
    try:
        yield f"postgresql://tackroom@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*prefix, str(pg_ctl), "-D", str(data), "-m", "immediate", "stop"], capture_output=True,
                       timeout=60)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def postgres_db(postgres_url: str) -> Iterator[str]:
    """A fresh database in the cluster for one test."""
    name = f"t{os.getpid()}_{time.monotonic_ns()}"
    admin = sa.create_engine(postgres_url.replace("postgresql://", "postgresql+psycopg://"),
                             isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield postgres_url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

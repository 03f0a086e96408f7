"""What ``up`` recorded about each engine (one state file per port under ``$TACKROOM_CACHE/engine``), and
whether the process it names is still that engine and healthy."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
from pydantic import BaseModel

from tackroom import ConfigError
from tackroom_engine.settings import DEFAULT_PORT, engine_dir


class EngineState(BaseModel):
    """What ``up`` wrote: enough for ``down``/``status`` in another process."""

    pid: int
    base_url: str
    model: str
    model_path: str
    log: str
    started_at: float
    proc_start: str | None = None
    """The process's kernel start time: a recycled pid of a dead engine is not mistaken for it."""

    @property
    def port(self) -> int:
        return httpx.URL(self.base_url).port or 80


def state_file(port: int = DEFAULT_PORT) -> Path:
    """The state of the engine on ``port``."""
    return engine_dir() / f"state-{port}.json"


def log_file(port: int = DEFAULT_PORT) -> Path:
    return engine_dir() / f"server-{port}.log"


def legacy_state_file() -> Path:
    """Where the one engine's state lived before engines had a port each; read, never written."""
    return engine_dir() / "state.json"


def _load(path: Path) -> EngineState | None:
    try:
        return EngineState.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return None


def read_state(port: int = DEFAULT_PORT) -> EngineState | None:
    """What ``up`` wrote for the engine on ``port`` (or the legacy file, when it names that port)."""
    state = _load(state_file(port))
    if state is None:
        state = _load(legacy_state_file())
        if state is not None and state.port != port:
            state = None
    return state


def _forget(port: int) -> None:
    state_file(port).unlink(missing_ok=True)
    legacy = _load(legacy_state_file())
    if legacy is not None and legacy.port == port:
        legacy_state_file().unlink(missing_ok=True)


def engines() -> list[EngineState]:
    """Every engine ``up`` recorded (running or not), by port."""
    found: dict[int, EngineState] = {}
    for path in sorted(engine_dir().glob("state-*.json")):
        state = _load(path)
        if state is not None and path == state_file(state.port):
            found[state.port] = state
    legacy = _load(legacy_state_file())
    if legacy is not None:
        found.setdefault(legacy.port, legacy)
    return [found[p] for p in sorted(found)]


def _proc_start(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (field 22 of /proc/PID/stat), to tell a recycled pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _zombie(pid: int) -> bool:
    """Has ``pid`` exited without being reaped? (An engine this process started and stopped stays a zombie
    until reaped; reap it when it is our child.)"""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    if state != "Z":
        return False
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    return True


def _group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and fields[2] == str(pgid):
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int, started: str | None = None) -> bool:
    """Is ``pid`` running, and (when ``started`` is known) still the same process?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if _zombie(pid):
        return False
    return started is None or _proc_start(pid) in (None, started)


def healthy(base_url: str, timeout: float = 3.0) -> bool:
    root = base_url.removesuffix("/v1")
    try:
        return httpx.get(f"{root}/health", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def running_engine_url(port: int = DEFAULT_PORT) -> str | None:
    """The base URL of a healthy engine started by ``tackroom model up`` on ``port``, else None."""
    state = read_state(port)
    if state is not None and _alive(state.pid, state.proc_start) and healthy(state.base_url):
        return state.base_url
    return None


def status(port: int = DEFAULT_PORT) -> dict[str, object]:
    """The engine on ``port``: ``running``, ``healthy`` and what ``up`` recorded."""
    state = read_state(port)
    if state is None:
        return {"running": False, "healthy": False}
    return _describe(state)


def _describe(state: EngineState) -> dict[str, object]:
    alive = _alive(state.pid, state.proc_start)
    return {"running": alive, "healthy": alive and healthy(state.base_url), "port": state.port, **state.model_dump()}


def statuses() -> list[dict[str, object]]:
    """Every recorded engine, as :func:`status` describes one, by port."""
    return [_describe(state) for state in engines()]


def require_engine(port: int = DEFAULT_PORT) -> str:
    """The running engine's base URL, or a ConfigError telling the user how to start one."""
    url = running_engine_url(port)
    if url is None:
        hint = "" if port == DEFAULT_PORT else f" --port {port}"
        raise ConfigError(f"no local engine is running: start one with `tackroom model up{hint}`")
    return url

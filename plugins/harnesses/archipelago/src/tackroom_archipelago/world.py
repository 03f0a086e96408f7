"""Worlds: a directory of files plus the MCP servers that operate on them (``world.toml``, see docs/worlds.md).

This module reads a world, prepares its Python packages for the sandbox's own
``python3`` on the host (``uv pip install --target`` for that interpreter's
version and platform, cached), uploads everything, and starts the world gateway
inside the sandbox.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import shlex
import shutil
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tackroom import Sandbox, cache_root
from tackroom_archipelago.errors import WorldBuildError, WorldFormatError, WorldRuntimeError
from tackroom_worlds import FilesSpec, WorldTable, task_world_dir  # the task-side tables every harness reads

SANDBOX_SIDE = Path(__file__).with_name("sandbox_side")
WORLD_FILE = "world.toml"
MIN_PYTHON = (3, 10)


class ServerSpec(BaseModel):
    """``[[servers]]``: a Python module with ``build_server(root)`` (in the gateway's process) or a stdio command."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z][a-z0-9]*$", description="Tool-name prefix: tools appear as <name>_<tool>")
    module: str | None = None
    command: list[str] | None = None
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    timeout_sec: float = 600.0

    @model_validator(mode="after")
    def _one_kind(self) -> ServerSpec:
        if (self.module is None) == (self.command is None):
            raise ValueError("give exactly one of `module` (a Python module) or `command` (a stdio MCP server)")
        return self


class RuntimeSpec(BaseModel):
    """``[runtime]``: what the servers need from Python inside the sandbox."""

    model_config = ConfigDict(extra="forbid")

    python: str = "python3"
    requirements: list[str] = Field(default_factory=list)
    pythonpath: list[str] = Field(default_factory=list)


class WorldInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""


class WorldSpec(BaseModel):
    """A parsed ``world.toml`` plus the directory it came from."""

    model_config = ConfigDict(extra="forbid")

    world: WorldInfo
    files: FilesSpec = Field(default_factory=FilesSpec)
    runtime: RuntimeSpec = Field(default_factory=RuntimeSpec)
    servers: list[ServerSpec] = Field(min_length=1)
    path: Path = Field(default=Path("."), exclude=True)

    @property
    def name(self) -> str:
        return self.world.name

    @property
    def files_dir(self) -> Path:
        return self.path / self.files.source


def load_world(directory: str | Path) -> WorldSpec:
    """Read ``<directory>/world.toml``; :class:`WorldFormatError` names the file and every bad field."""
    root = Path(directory).resolve()
    file = root / WORLD_FILE
    if not file.is_file():
        raise WorldFormatError(f"{file}: missing; a world directory needs a world.toml (see docs/worlds.md)")
    try:
        raw = tomllib.loads(file.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise WorldFormatError(f"{file}: invalid TOML: {exc}") from exc
    try:
        spec = WorldSpec.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(top level)'}: {e['msg']}" for e in exc.errors())
        raise WorldFormatError(f"{file}: {problems}") from exc
    spec.path = root
    names = [s.name for s in spec.servers]
    if len(set(names)) != len(names):
        raise WorldFormatError(f"{file}: server names must be unique, got {names}")
    if not spec.files_dir.is_dir():
        raise WorldFormatError(f"{file}: files.source {spec.files.source!r} is not a directory in {root}")
    for p in spec.runtime.pythonpath:
        if not (root / p).is_dir():
            raise WorldFormatError(f"{file}: runtime.pythonpath entry {p!r} is not a directory in {root}")
    if not spec.files.mount.startswith("/"):
        raise WorldFormatError(f"{file}: files.mount must be an absolute sandbox path, got {spec.files.mount!r}")
    return spec


# -- the sandbox's interpreter and the site built for it -------------------------------------------
class SandboxPython(BaseModel):
    """The interpreter the world's servers will run on."""

    executable: str
    major: int
    minor: int
    machine: str
    libc: str
    libc_version: str

    @property
    def version(self) -> str:
        return f"{self.major}.{self.minor}"

    @property
    def uv_platform(self) -> str:
        """uv's ``--python-platform`` for this interpreter."""
        if self.libc != "glibc":
            return f"{self.machine}-unknown-linux-musl"
        minor = int(self.libc_version.split(".")[1]) if "." in self.libc_version else 17
        return f"{self.machine}-manylinux_2_{max(17, min(minor, 39))}"


_PROBE = ("import platform, sys; lib, ver = platform.libc_ver(); "
          "print(sys.version_info[0], sys.version_info[1], platform.machine(), lib or 'musl', ver or '0.0')")


async def probe_python(sandbox: Sandbox, executable: str) -> SandboxPython:
    """Ask the sandbox which python it has; :class:`WorldRuntimeError` when there is none or it is too old."""
    result = await sandbox.exec([executable, "-c", _PROBE], timeout=60)
    if not result.ok:
        raise WorldRuntimeError(
            f"the sandbox has no usable {executable!r} ({(result.stderr or result.stdout).strip()[:300]}); a world's MCP "
            "servers run on the sandbox's own Python: use an image with python3 >= 3.10 (e.g. debian:bookworm-slim "
            "plus python3, or any python:3.x image), or set [runtime] python in world.toml"
        )
    major, minor, machine, libc, version = result.stdout.split()
    found = SandboxPython(executable=executable, major=int(major), minor=int(minor), machine=machine,
                          libc=libc, libc_version=version)
    if (found.major, found.minor) < MIN_PYTHON:
        raise WorldRuntimeError(
            f"the sandbox's {executable} is Python {found.version}; the MCP SDK needs >= 3.10: use a newer image"
        )
    return found


def _uv_binary() -> str:
    found = shutil.which("uv")
    if found:
        return found
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError) as exc:
        raise WorldBuildError(
            "uv is needed to prepare the world's packages for the sandbox's Python; `pip install uv` "
            "(tackroom-archipelago depends on it, so reinstalling the plugin also fixes this)"
        ) from exc


_build_locks: dict[str, asyncio.Lock] = {}


async def build_site(requirements: list[str], python: SandboxPython, cache_dir: Path | None = None,
                     timeout: float = 600.0) -> Path:
    """A directory of the requirements installed for ``python`` (cached by requirements and interpreter)."""
    cache = Path(cache_dir) if cache_dir else cache_root() / "worlds" / "sites"
    key = hashlib.sha256(json.dumps([sorted(requirements), python.version, python.uv_platform]).encode()).hexdigest()[:16]
    target = cache / f"py{python.version}-{python.uv_platform}-{key}"
    if (target / ".tackroom-complete").is_file():
        return target
    lock = _build_locks.setdefault(key, asyncio.Lock())
    async with lock:
        if (target / ".tackroom-complete").is_file():
            return target
        cache.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=cache))
        argv = [_uv_binary(), "pip", "install", "--quiet", "--target", str(tmp / "site"),
                "--python-version", python.version, "--python-platform", python.uv_platform, *requirements]
        proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError as exc:
            proc.kill()
            shutil.rmtree(tmp, ignore_errors=True)
            raise WorldBuildError(f"preparing the world's packages took longer than {timeout:.0f}s: {' '.join(argv)}") from exc
        if proc.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise WorldBuildError(
                f"could not install the world's requirements for Python {python.version} ({python.uv_platform}): "
                f"{(err or out).decode(errors='replace')[-1500:]}"
            )
        (tmp / "site" / ".tackroom-complete").write_text(json.dumps(requirements))
        try:
            (tmp / "site").rename(target)
        except OSError:  # another process finished the same build first
            pass
        shutil.rmtree(tmp, ignore_errors=True)
    return target


# -- in the sandbox ------------------------------------------------------------------------------
class GatewayHandle(BaseModel):
    """A started world gateway: where it listens inside the sandbox and how to reach its relay."""

    port: int
    base: str
    python: str
    relay: str
    log: str
    url: str | None = None
    """A URL the host can reach directly (the sandbox exposed the port); None means: relay through exec."""
    tools: int = 0
    startup_s: float = 0.0


async def install_world(sandbox: Sandbox, world: WorldSpec, *, base: str, cache_dir: Path | None = None,
                        build_timeout: float = 600.0) -> SandboxPython:
    """Upload the world's files, servers, packages and the gateway scripts into the sandbox."""
    python = await probe_python(sandbox, world.runtime.python)
    site = await build_site(world.runtime.requirements, python, cache_dir, build_timeout)
    await sandbox.exec(f"mkdir -p {shlex.quote(base)} {shlex.quote(world.files.mount)}", timeout=60)
    await sandbox.upload(world.files_dir, world.files.mount, timeout=300)
    await sandbox.upload(site, f"{base}/site", timeout=600)
    for p in world.runtime.pythonpath:
        await sandbox.upload(world.path / p, f"{base}/{Path(p).name}", timeout=300)
    for script in ("world_gateway.py", "http_relay.py"):
        await sandbox.upload(SANDBOX_SIDE / script, f"{base}/{script}", timeout=60)
    return python


async def start_gateway(sandbox: Sandbox, world: WorldSpec, python: SandboxPython, *, base: str,
                        timeout: float = 120.0, port: int | None = None, transport: str = "auto") -> GatewayHandle:
    """Start the world gateway in the background and wait until ``/health`` answers."""
    port = port or random.randint(20000, 60000)
    config = {
        "name": world.name, "root": world.files.mount, "mount": world.files.mount, "host": "127.0.0.1", "port": port,
        "servers": [s.model_dump(exclude_none=True) for s in world.servers],
    }
    await sandbox.write_file(f"{base}/gateway.json", json.dumps(config, indent=2))
    pythonpath = ":".join([f"{base}/site", *(f"{base}/{Path(p).name}" for p in world.runtime.pythonpath)])
    log = f"{base}/gateway.log"
    cmd = (f"cd {shlex.quote(world.files.mount)} || exit 1; PYTHONPATH={shlex.quote(pythonpath)} WORLD_ROOT={shlex.quote(world.files.mount)} "
           f"nohup {python.executable} {base}/world_gateway.py --config {base}/gateway.json "
           f"> {log} 2>&1 < /dev/null & echo $! > {base}/gateway.pid")
    started = time.monotonic()
    result = await sandbox.exec(cmd, timeout=60)
    if not result.ok:
        raise WorldRuntimeError(f"could not start the world gateway: {(result.stderr or result.stdout)[-1000:]}")
    handle = GatewayHandle(port=port, base=base, python=python.executable, relay=f"{base}/http_relay.py", log=log)
    if transport in ("auto", "http"):
        try:
            handle.url = (await sandbox.expose(port)).rstrip("/")
        except Exception as exc:
            if transport == "http":
                raise WorldRuntimeError(f"transport = 'http' but the sandbox cannot expose port {port}: {exc}") from exc
    deadline = started + timeout
    while True:
        health = await _health(sandbox, handle)
        if health is not None:
            handle.tools = int(health.get("tools", 0))
            handle.startup_s = round(time.monotonic() - started, 3)
            return handle
        alive = await sandbox.exec(f"kill -0 $(cat {base}/gateway.pid) 2>/dev/null", timeout=30)
        if not alive.ok:
            tail = await sandbox.exec(f"tail -c 3000 {log}", timeout=30)
            raise WorldRuntimeError(f"the world gateway of {world.name!r} exited while starting:\n{tail.stdout}")
        if time.monotonic() > deadline:
            tail = await sandbox.exec(f"tail -c 3000 {log}", timeout=30)
            from tackroom_archipelago.errors import McpGatewayError

            raise McpGatewayError(f"the world gateway did not answer /health within {timeout:.0f}s:\n{tail.stdout}")
        await asyncio.sleep(0.25)


async def _health(sandbox: Sandbox, handle: GatewayHandle) -> dict[str, Any] | None:
    if handle.url is not None:
        import httpx

        try:
            async with httpx.AsyncClient(timeout=5) as client:
                resp = await client.get(f"{handle.url}/health")
            return resp.json() if resp.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
    request = json.dumps({"method": "GET", "path": "/health", "headers": [], "body": "", "port": handle.port, "timeout": 5})
    result = await sandbox.exec([handle.python, handle.relay], stdin=request, timeout=30)
    try:
        out = json.loads(result.stdout)
    except ValueError:
        return None
    if out.get("status") != 200:
        return None
    import base64

    return json.loads(base64.b64decode(out["body"]))


__all__ = [
    "FilesSpec", "WorldTable", "task_world_dir",
    "GatewayHandle", "SandboxPython", "ServerSpec", "WorldSpec", "build_site", "install_world", "load_world",
    "probe_python", "start_gateway",
]

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
import posixpath
import random
import re
import shlex
import shutil
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tackroom import Sandbox, Task, cache_root
from tackroom_archipelago.errors import WorldBuildError, WorldFormatError, WorldRuntimeError
from tackroom_archipelago.projects import (
    IGNORED,
    PYTHON_WORDS,
    ServerProject,
    expand_path,
    find_interpreters,
    missing_python_error,
    python_candidates,
    read_project,
)
from tackroom_worlds import (  # the task-side tables every harness reads
    FilesSpec,
    WorldTable,
    task_world,
    task_world_dir,
)

SANDBOX_SIDE = Path(__file__).with_name("sandbox_side")
WORLD_FILE = "world.toml"
MIN_PYTHON = (3, 10)
GATEWAY_REQUIREMENTS = ["mcp>=2.3,<3"]
"""What the world gateway itself imports (uvicorn and starlette come with the MCP SDK); always installed."""


def task_system_prompt(task: Task) -> str | None:
    """The system message the task's ``[world]`` table gives, ``None`` when it gives none."""
    table = task_world(task)
    return None if table is None else table.system_prompt


class ServerSpec(BaseModel):
    """``[[servers]]``: a Python module with ``build_server(root)`` (in the gateway's process), a stdio command,
    or a stdio command run from a uv ``project`` of its own (its own Python and packages, see projects.py)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z][a-z0-9]*$", description="Tool-name prefix: tools appear as <name>_<tool>")
    module: str | None = None
    command: list[str] | None = None
    project: str | None = Field(default=None, description="A uv project folder (relative to the world; ${VAR:-default} "
                                "expanded): the server gets its own site built for its requires-python")
    python: str | None = Field(default=None, description="The project's interpreter in the sandbox (default: the "
                               "newest python3.X its requires-python allows, then python3)")
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = Field(default=None, description="The server's working directory (relative to the project for "
                            "a project server)")
    timeout_sec: float = 600.0

    @model_validator(mode="after")
    def _one_kind(self) -> ServerSpec:
        if self.project is not None and self.command is None:
            raise ValueError("a `project` server needs a `command` (e.g. [\"python\", \"main.py\"], run in `cwd`)")
        if (self.module is None) == (self.command is None):
            raise ValueError("give exactly one of `module` (a Python module) or `command` (a stdio MCP server)")
        if self.python is not None and self.project is None:
            raise ValueError("`python` applies to a `project` server only")
        return self


class RuntimeSpec(BaseModel):
    """``[runtime]``: what the servers need from Python inside the sandbox."""

    model_config = ConfigDict(extra="forbid")

    python: str = "python3"
    requirements: list[str] = Field(default_factory=list)
    pythonpath: list[str] = Field(default_factory=list)
    startup_timeout_sec: float | None = Field(
        default=None, gt=0, description="How long the gateway may take to start every server and list their tools, "
        "when longer than the harness's gateway_startup_timeout_sec (Mercor's servers take tens of seconds each)")


class WorldInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""


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


class WorldSpec(BaseModel):
    """A parsed ``world.toml`` plus the directory it came from."""

    model_config = ConfigDict(extra="forbid")

    world: WorldInfo
    files: FilesSpec = Field(default_factory=FilesSpec)
    runtime: RuntimeSpec = Field(default_factory=RuntimeSpec)
    servers: list[ServerSpec] = Field(min_length=1)
    path: Path = Field(default=Path("."), exclude=True)
    projects: dict[str, ServerProject] = Field(default_factory=dict, exclude=True)
    """The project servers' uv projects, by server name (read by :func:`load_world`)."""
    interpreters: dict[str, SandboxPython] = Field(default_factory=dict, exclude=True)
    """The sandbox interpreter each project server runs on (found by :func:`install_world`)."""

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
    for server in spec.servers:
        if server.project is not None:
            where = f"{file}: servers {server.name!r}"
            project = read_project(expand_path(server.project, root, where=where), where=where)
            cwd = (project.path / (server.cwd or ".")).resolve()
            if not cwd.is_relative_to(project.path) or not cwd.is_dir():
                raise WorldFormatError(f"{where}: cwd {server.cwd!r} is not a folder inside the project {project.path}")
            spec.projects[server.name] = project
    return spec


# -- the sandbox's interpreter and the site built for it -------------------------------------------
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
    return await _install_target(target, requirements, python, cwd=None, timeout=timeout,
                                 what="the world's requirements")


LOCKED_REQUIREMENTS = ".tackroom-locked-requirements.txt"
"""Where a project's ``uv.lock`` is exported (in the staged copy) before its packages are installed."""


async def build_project_site(project: ServerProject, python: SandboxPython, cache_dir: Path | None = None,
                             timeout: float = 600.0) -> Path:
    """The project's dependencies with all its extras (and its vendored path sources) installed for ``python``,
    as ``uv sync --all-extras`` would give them (without the dev group): the versions of its ``uv.lock`` when it
    has one (``uv export --frozen``: the lock as written, which needs no Python of that version on the host; a lock
    older than its pyproject gives the lock's packages), else ``uv pip install -r pyproject.toml`` run in the
    project, so uv reads its ``[tool.uv]`` sources and overrides; the project itself too when it is a package. Cached by the project's pyproject, lock, vendored packages' files and the interpreter."""
    cache = Path(cache_dir) if cache_dir else cache_root() / "worlds" / "projects"
    slug = re.sub(r"[^A-Za-z0-9_.-]", "-", project.name)
    target = cache / f"{slug}-py{python.version}-{python.uv_platform}-{project.fingerprint()}"
    if (target / ".tackroom-complete").is_file():
        return target
    what = f"project {project.name} ({project.path})"
    with tempfile.TemporaryDirectory(prefix="tackroom-project-build-") as staging:
        staged = await asyncio.to_thread(project.stage, Path(staging))
        if project.lock is None:
            args = ["-r", "pyproject.toml", "--all-extras", *(["."] if project.package else [])]
        else:  # the export names the project itself (".") when it is a package, as uv sync would install it
            await _run_uv(["export", "--frozen", "--quiet", "--no-dev", "--all-extras", "--no-editable",
                           "--no-hashes", "--output-file", LOCKED_REQUIREMENTS], cwd=staged, timeout=timeout,
                          what=f"export the uv.lock of {what}", hint="`uv export --frozen` in the project shows the "
                          "same; `uv lock` there rewrites the lock, or delete it to let uv resolve the pyproject afresh")
            args = ["-r", LOCKED_REQUIREMENTS]
        return await _install_target(target, args, python, cwd=staged, timeout=timeout, what=what)


async def _run_uv(args: list[str], *, cwd: Path | None, timeout: float, what: str, hint: str = "") -> None:
    """``uv ARGS`` in ``cwd`` to ``what`` (a verb phrase); :class:`WorldBuildError` with uv's own words when it fails
    or outlasts ``timeout``."""
    argv = [_uv_binary(), *args]
    proc = await asyncio.create_subprocess_exec(*argv, cwd=cwd, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError as exc:
        proc.kill()
        await proc.wait()
        raise WorldBuildError(f"could not {what} in {timeout:.0f}s: {' '.join(argv)}") from exc
    if proc.returncode != 0:
        raise WorldBuildError(f"could not {what}: {(err or out).decode(errors='replace')[-1500:].strip()}"
                              + (f" ({hint})" if hint else ""))


async def _install_target(target: Path, args: list[str], python: SandboxPython, *, cwd: Path | None, timeout: float,
                          what: str) -> Path:
    if (target / ".tackroom-complete").is_file():
        return target
    lock = _build_locks.setdefault(str(target), asyncio.Lock())
    async with lock:
        if (target / ".tackroom-complete").is_file():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        try:
            await _run_uv(["pip", "install", "--quiet", "--target", str(tmp / "site"), "--python-version",
                           python.version, "--python-platform", python.uv_platform, *args], cwd=cwd,
                          timeout=timeout, what=f"install {what} for Python {python.version} ({python.uv_platform})")
        except WorldBuildError:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        (tmp / "site" / ".tackroom-complete").write_text(json.dumps(args))
        try:
            (tmp / "site").rename(target)
        except OSError:  # another process finished the same build first
            pass
        shutil.rmtree(tmp, ignore_errors=True)
    return target


async def project_python(sandbox: Sandbox, server: ServerSpec, project: ServerProject) -> SandboxPython:
    """The sandbox interpreter a project server runs on: its ``python``, else the newest ``python3.X`` its
    ``requires-python`` allows, else ``python3``; :class:`WorldRuntimeError` naming what is missing."""
    wanted = [server.python] if server.python else python_candidates(project.specifier)
    found = await find_interpreters(sandbox, wanted)
    for name in wanted:
        if name in found:
            exe, major, minor, machine, libc, version = found[name]
            if project.specifier.contains(f"{major}.{minor}", prereleases=True):
                return SandboxPython(executable=exe, major=int(major), minor=int(minor), machine=machine, libc=libc,
                                     libc_version=version)
    raise missing_python_error(server.name, project, wanted, found)


# -- in the sandbox ------------------------------------------------------------------------------
class ServerListing(BaseModel):
    """One server as the gateway mounted it."""

    tools: int
    seconds: float


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
    listing: dict[str, ServerListing] = Field(default_factory=dict)
    """Per server: its tool count and the seconds from its start to its tool list."""

    def describe(self) -> str:
        """One line per trial's notes: each server's tool count and listing time."""
        return ", ".join(f"{name}: {s.tools} tools in {s.seconds:.1f}s" for name, s in self.listing.items())


async def install_world(sandbox: Sandbox, world: WorldSpec, *, base: str, cache_dir: Path | None = None,
                        build_timeout: float = 600.0) -> SandboxPython:
    """Upload the world's files, servers, packages and the gateway scripts into the sandbox; each project server's
    project and its own site go to ``<base>/projects/<name>/`` (its interpreter is kept in ``world.interpreters``)."""
    python = await probe_python(sandbox, world.runtime.python)
    site = await build_site([*GATEWAY_REQUIREMENTS, *world.runtime.requirements], python, cache_dir, build_timeout)
    await sandbox.exec(f"mkdir -p {shlex.quote(base)} {shlex.quote(world.files.mount)}", timeout=60)
    await sandbox.upload(world.files_dir, world.files.mount, timeout=300)
    await sandbox.upload(site, f"{base}/site", timeout=600)
    for p in world.runtime.pythonpath:
        await sandbox.upload(world.path / p, f"{base}/{Path(p).name}", timeout=300)
    for server in world.servers:
        project = world.projects.get(server.name)
        if project is None:
            continue
        interpreter = await project_python(sandbox, server, project)
        project_site = await build_project_site(project, interpreter, cache_dir, build_timeout)
        with tempfile.TemporaryDirectory(prefix="tackroom-project-") as staged:
            # A checkout's .venv (built for the host), .git or build leftovers have no place in the sandbox.
            copy = shutil.copytree(project.path, Path(staged) / "project", symlinks=True, ignore=IGNORED)
            await sandbox.upload(copy, f"{base}/projects/{server.name}/project", timeout=300)
        await sandbox.upload(project_site, f"{base}/projects/{server.name}/site", timeout=1200)
        world.interpreters[server.name] = interpreter
    for script in ("world_gateway.py", "http_relay.py"):
        await sandbox.upload(SANDBOX_SIDE / script, f"{base}/{script}", timeout=60)
    return python


def gateway_server_config(world: WorldSpec, server: ServerSpec, base: str) -> dict[str, Any]:
    """What the world gateway is told about one server; a project server's ``python`` becomes its interpreter,
    its ``cwd`` a folder of the uploaded project, and its ``PYTHONPATH`` its own site (after any it sets)."""
    config = server.model_dump(exclude_none=True, exclude={"project", "python"})
    if server.project is None:
        return config
    interpreter = world.interpreters.get(server.name)
    if interpreter is None:
        raise RuntimeError(f"server {server.name!r}: install_world() first")
    home = f"{base}/projects/{server.name}"
    command = list(server.command or [])
    if command and command[0] in PYTHON_WORDS:
        command[0] = interpreter.executable
    env = {"PYTHONNOUSERSITE": "1", **server.env}
    env["PYTHONPATH"] = ":".join(p for p in (server.env.get("PYTHONPATH"), f"{home}/site") if p)
    config.update(command=command, env=env, cwd=posixpath.normpath(f"{home}/project/{server.cwd or '.'}"))
    return config


async def start_gateway(sandbox: Sandbox, world: WorldSpec, python: SandboxPython, *, base: str,
                        timeout: float = 120.0, port: int | None = None, transport: str = "auto") -> GatewayHandle:
    """Start the world gateway in the background and wait until ``/health`` answers."""
    port = port or random.randint(20000, 60000)
    timeout = max(timeout, world.runtime.startup_timeout_sec or 0.0)
    config = {
        "name": world.name, "root": world.files.mount, "mount": world.files.mount, "host": "127.0.0.1", "port": port,
        "logs": f"{base}/servers",  # each stdio server's stderr, apart, so a failure can quote its own words
        "servers": [gateway_server_config(world, s, base) for s in world.servers],
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
            handle.listing = {k: ServerListing.model_validate(v) for k, v in (health.get("listing") or {}).items()}
            handle.startup_s = round(time.monotonic() - started, 3)
            return handle
        alive = await sandbox.exec(f"kill -0 $(cat {base}/gateway.pid) 2>/dev/null", timeout=30)
        if not alive.ok:
            tail = await sandbox.exec(f"tail -c 3000 {log}", timeout=30)
            raise WorldRuntimeError(f"the world gateway of {world.name!r} exited while starting:\n{tail.stdout}")
        if time.monotonic() > deadline:
            tail = await sandbox.exec(f"tail -c 3000 {log}; for f in {base}/servers/*.log; do [ -f \"$f\" ] && "
                                      f"printf '\\n--- %s ---\\n' \"$f\" && tail -c 1500 \"$f\"; done", timeout=30)
            from tackroom_archipelago.errors import McpGatewayError

            raise McpGatewayError(f"the world gateway did not answer /health within {timeout:.0f}s (the last server "
                                  f"it started is the one still starting; [runtime] startup_timeout_sec gives it "
                                  f"longer):\n{tail.stdout}")
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

"""Worlds: a directory of files plus the MCP servers that operate on them (``world.toml``, see docs/worlds.md).

This module reads a world, prepares its Python packages for the sandbox's own
``python3`` on the host (``uv pip install --target`` for that interpreter's
version and platform, cached) into the world's build (:mod:`~tackroom_archipelago.builds`:
once per world version, bound read-only into sandboxes that bind mounts, else
uploaded), uploads the world's files, and starts the world gateway inside the sandbox.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import posixpath
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
from tackroom.sandbox_features import ReadOnlyMounts
from tackroom_archipelago.builds import (
    BUILD_SCHEME,
    SANDBOX_SCRIPTS,
    builds_dir,
    copy_tree,
    ensure_part,
    hash_tree,
    link_tree,
    link_without_bytecode,
    make_build_dir,
    mark_used,
    prune_builds,
    tree_signature,
)
from tackroom_archipelago.errors import McpGatewayError, WorldBuildError, WorldFormatError, WorldRuntimeError
from tackroom_archipelago.projects import (
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

log = logging.getLogger(__name__)
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
        raise _no_python_error(executable, (result.stderr or result.stdout).strip()[:300])
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


def site_dir(requirements: list[str], python: SandboxPython, cache_dir: Path | None = None) -> Path:
    """Where :func:`build_site` keeps ``requirements`` installed for ``python``: one folder per requirement set,
    interpreter version and platform, under ``cache_dir`` (default: the cache's ``worlds/sites``)."""
    cache = Path(cache_dir) if cache_dir else cache_root() / "worlds" / "sites"
    key = hashlib.sha256(json.dumps([sorted(requirements), python.version, python.uv_platform]).encode()).hexdigest()[:16]
    return cache / f"py{python.version}-{python.uv_platform}-{key}"


async def build_site(requirements: list[str], python: SandboxPython, cache_dir: Path | None = None,
                     timeout: float = 600.0) -> Path:
    """A directory of the requirements installed for ``python`` (cached: :func:`site_dir`)."""
    return await _install_target(site_dir(requirements, python, cache_dir), requirements, python, cwd=None,
                                 timeout=timeout, what="the world's requirements")


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


def _no_python_error(executable: str, said: str = "") -> WorldRuntimeError:
    return WorldRuntimeError(
        f"the sandbox has no usable {executable!r}{f' ({said})' if said else ''}; a world's MCP servers run on the "
        "sandbox's own Python: use an image with python3 >= 3.10 (e.g. debian:bookworm-slim plus python3, or any "
        "python:3.x image), or set [runtime] python in world.toml"
    )


async def sandbox_pythons(sandbox: Sandbox, world: WorldSpec, *, first: str = "") -> SandboxPython:
    """The gateway's interpreter (``[runtime] python``) and, into ``world.interpreters``, each project server's: its
    ``python``, else the newest ``python3.X`` its ``requires-python`` allows, else ``python3``; all found in one exec
    (after ``first``). :class:`WorldRuntimeError` naming what is missing."""
    wanted = {s.name: [s.python] if s.python else python_candidates(world.projects[s.name].specifier)
              for s in world.servers if s.name in world.projects}
    found = await find_interpreters(sandbox, [world.runtime.python, *(n for names in wanted.values() for n in names)],
                                    first=first)

    def python_of(fields: list[str]) -> SandboxPython:
        exe, major, minor, machine, libc, version = fields
        return SandboxPython(executable=exe, major=int(major), minor=int(minor), machine=machine, libc=libc,
                             libc_version=version)

    if world.runtime.python not in found:
        raise _no_python_error(world.runtime.python)
    python = python_of(found[world.runtime.python])
    if (python.major, python.minor) < MIN_PYTHON:
        raise WorldRuntimeError(f"the sandbox's {world.runtime.python} is Python {python.version}; the MCP SDK needs "
                                ">= 3.10: use a newer image")
    for name, names in wanted.items():
        project = world.projects[name]
        usable = [n for n in names if n in found and project.specifier.contains(f"{found[n][1]}.{found[n][2]}",
                                                                                   prereleases=True)]
        if not usable:
            raise missing_python_error(name, project, names, {n: found[n] for n in names if n in found})
        world.interpreters[name] = python_of(found[usable[0]])
    return python


# -- the world's build: made once per world version, bound read-only or uploaded -------------------------
_versions: dict[str, tuple[Any, str]] = {}


def world_version(world: WorldSpec) -> str:
    """A key that changes whenever anything the world's build holds would: its requirements and pythonpath folders,
    its server projects (their files and fingerprints) (:mod:`~tackroom_archipelago.builds`; the gateway's scripts
    are a part of their own, by their own hash). Hashed again only when a file's size or time changed since this process last did (every trial asks)."""
    folders = [*(world.path / p for p in world.runtime.pythonpath),
               *(f for project in world.projects.values() for f in (project.path, *project.sources))]
    signature = (world.model_dump_json(), [tree_signature(f) for f in folders])
    cached = _versions.get(str(world.path))
    if cached is None or cached[0] != signature:
        _versions[str(world.path)] = (signature, _hash_world(world))
    return _versions[str(world.path)][1]


def _hash_world(world: WorldSpec) -> str:
    digest = hashlib.sha256(json.dumps([BUILD_SCHEME, world.name, GATEWAY_REQUIREMENTS,
                                        sorted(world.runtime.requirements), world.runtime.pythonpath]).encode())
    for folder in world.runtime.pythonpath:
        hash_tree(digest, world.path / folder)
    for name, project in sorted(world.projects.items()):
        digest.update(f"\0server {name} {project.fingerprint()}\0".encode())
        hash_tree(digest, project.path)
    return digest.hexdigest()[:16]


def world_build(world: WorldSpec, cache_dir: Path | None = None) -> Path:
    """The host folder of this world version's build, made (empty at first) and open to every uid."""
    slug = re.sub(r"[^A-Za-z0-9_.-]", "-", world.name)[:60]
    builds, name = builds_dir(cache_dir), f"{slug}-{world_version(world)}"
    new = not (builds / name).is_dir()
    folder = make_build_dir(builds, name)
    mark_used(builds, name)
    if new:
        removed = prune_builds(builds, name)
        if removed:
            log.info("removed world builds no trial used lately: %s", ", ".join(removed))
    return folder


class WorldLayout(BaseModel):
    """Where one sandbox holds a world: its build (bound read-only at the harness's ``build_path``, or uploaded to
    ``<base>/build``) and the trial's own writable ``base``."""

    base: str
    root: str
    """Where the build is: ``build_path`` when bound, else ``<base>/build``."""
    mounted: bool
    python: SandboxPython
    """The gateway's interpreter."""
    gateway_tag: str
    scripts: str
    """The part holding the gateway's scripts (``scripts/<their hash>``)."""
    server_tags: dict[str, str] = Field(default_factory=dict)
    compiled: bool = True
    """The bound build's bytecode was compiled on the host (else each trial compiles what it imports: into
    ``<base>/pycache`` from a bound build, beside the sources of an uploaded one, which goes without bytecode)."""

    @property
    def gateway_dir(self) -> str:
        return f"{self.root}/gateway/{self.gateway_tag}"

    @property
    def scripts_dir(self) -> str:
        return f"{self.root}/{self.scripts}"

    def server_part(self, name: str) -> str:
        return f"{self.root}/servers/{name}/{self.server_tags[name]}"

    def project(self, name: str) -> str:
        """A project server's project: a writable copy in ``base`` when the build is bound (a server may write beside
        its code, a database say), else the uploaded one."""
        return f"{self.base}/projects/{name}/project" if self.mounted else f"{self.server_part(name)}/project"


def interpreter_tag(python: SandboxPython) -> str:
    return f"py{python.version}-{python.uv_platform}"


def scripts_part() -> str:
    """``scripts/<hash of the gateway's scripts>``: a change to them is a small part, not a new world version."""
    digest = hashlib.sha256(b"".join((SANDBOX_SIDE / s).read_bytes() for s in SANDBOX_SCRIPTS))
    return f"scripts/{digest.hexdigest()[:16]}"


async def build_parts(world: WorldSpec, python: SandboxPython, build: Path, *, cache_dir: Path | None = None,
                      timeout: float = 600.0) -> dict[str, dict[str, Any]]:
    """The parts of ``build`` this sandbox's interpreters need (the gateway's, each project server's), made where
    missing, at once; their :data:`~tackroom_archipelago.builds.COMPLETE` records by part."""
    uv = _uv_binary()

    async def gateway(stage: Path) -> None:
        site = await build_site([*GATEWAY_REQUIREMENTS, *world.runtime.requirements], python, cache_dir, timeout)
        await asyncio.to_thread(link_tree, site, stage / "site")
        for folder in world.runtime.pythonpath:
            await asyncio.to_thread(copy_tree, world.path / folder, stage / "path" / Path(folder).name)

    async def scripts(stage: Path) -> None:
        for script in SANDBOX_SCRIPTS:
            shutil.copy2(SANDBOX_SIDE / script, stage / script)

    def server(project: ServerProject, interpreter: SandboxPython) -> Any:
        async def fill(stage: Path) -> None:
            site = await build_project_site(project, interpreter, cache_dir, timeout)
            await asyncio.to_thread(link_tree, site, stage / "site")
            await asyncio.to_thread(copy_tree, project.path, stage / "project")

        return fill

    wanted = {f"gateway/{interpreter_tag(python)}": (gateway, python), scripts_part(): (scripts, python)}
    for name, project in world.projects.items():
        interpreter = world.interpreters[name]
        wanted[f"servers/{name}/{interpreter_tag(interpreter)}"] = (server(project, interpreter), interpreter)
    made = await asyncio.gather(*(ensure_part(build, rel, fill, version=py.version, uv=uv, timeout=timeout)
                                  for rel, (fill, py) in wanted.items()))
    return dict(zip(wanted, made, strict=True))


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
                        build_timeout: float = 600.0, build_path: str | None = None) -> WorldLayout:
    """Put the world into the sandbox: find its interpreters (one exec, which also makes ``base`` and the files'
    mount), make the build's parts they need (on the host, once per world version and interpreter), upload the
    world's files, and the parts too unless the sandbox binds the build read-only at ``build_path``
    (``SandboxSpec.mounts``, asked for by the harness's ``mounts``)."""
    python = await sandbox_pythons(sandbox, world, first=f"mkdir -p {shlex.quote(base)} {shlex.quote(world.files.mount)}")
    build = await asyncio.to_thread(world_build, world, cache_dir)
    parts = await build_parts(world, python, build, cache_dir=cache_dir, timeout=build_timeout)
    bound = sandbox.spec.mounts.get(build_path) if build_path and isinstance(sandbox, ReadOnlyMounts) else None
    mounted = bound is not None and bound.resolve() == build.resolve()
    layout = WorldLayout(base=base, root=build_path if mounted else f"{base}/build", mounted=mounted, python=python,
                         gateway_tag=interpreter_tag(python), scripts=scripts_part(),
                         server_tags={name: interpreter_tag(py) for name, py in world.interpreters.items()},
                         compiled=all(part.get("bytecode") for part in parts.values()))
    await sandbox.upload(world.files_dir, world.files.mount, timeout=300)
    if not mounted:  # the sandbox compiles what it imports, into its own copy
        layout.compiled = False
        for rel in parts:
            with tempfile.TemporaryDirectory(prefix=".upload-", dir=build.parent) as tmp:
                await asyncio.to_thread(link_without_bytecode, build / rel, Path(tmp) / "part")
                await sandbox.upload(Path(tmp) / "part", f"{layout.root}/{rel}", timeout=1200)
    return layout


def gateway_server_config(world: WorldSpec, server: ServerSpec, layout: WorldLayout) -> dict[str, Any]:
    """What the world gateway is told about one server; a project server's ``python`` becomes its interpreter,
    its ``cwd`` a folder of its project, and its ``PYTHONPATH`` its own site (after any it sets)."""
    config = server.model_dump(exclude_none=True, exclude={"project", "python"})
    if server.project is None:
        return config
    interpreter = world.interpreters.get(server.name)
    if interpreter is None:
        raise RuntimeError(f"server {server.name!r}: install_world() first")
    command = list(server.command or [])
    if command and command[0] in PYTHON_WORDS:
        command[0] = interpreter.executable
    env = {"PYTHONNOUSERSITE": "1", **server.env}
    env["PYTHONPATH"] = ":".join(p for p in (server.env.get("PYTHONPATH"), f"{layout.server_part(server.name)}/site")
                                 if p)
    config.update(command=command, env=env, cwd=posixpath.normpath(f"{layout.project(server.name)}/{server.cwd or '.'}"))
    if layout.mounted:  # a bound build is read-only: the gateway copies the project to where its server may write
        config["copy"] = [f"{layout.server_part(server.name)}/project", layout.project(server.name)]
    return config


async def start_gateway(sandbox: Sandbox, world: WorldSpec, layout: WorldLayout, *, timeout: float = 120.0,
                        port: int | None = None, transport: str = "auto") -> GatewayHandle:
    """Start the world gateway in the background (one exec, its config on stdin) and wait until ``/health``
    answers (one more: the relay waits inside the sandbox, watching the gateway's pid)."""
    # With no port named the gateway binds port 0 and writes the port the kernel gave it to gateway.port: a port
    # drawn here could be in use (on the host's network, by any listener or outgoing connection) by the time it binds.
    timeout = max(timeout, world.runtime.startup_timeout_sec or 0.0)
    base, gateway, scripts = layout.base, layout.gateway_dir, layout.scripts_dir
    config = {
        "name": world.name, "root": world.files.mount, "mount": world.files.mount, "host": "127.0.0.1", "port": port or 0,
        "port_file": f"{base}/gateway.port",
        "logs": f"{base}/servers",  # each stdio server's stderr, apart, so a failure can quote its own words
        "servers": [gateway_server_config(world, s, layout) for s in world.servers],
    }
    env = {"PYTHONPATH": ":".join([f"{gateway}/site", *(f"{gateway}/path/{Path(p).name}" for p in world.runtime.pythonpath)]),
           "WORLD_ROOT": world.files.mount}
    if layout.mounted and not layout.compiled:  # nothing can be written into the bound build: compile elsewhere
        env["PYTHONPYCACHEPREFIX"] = f"{base}/pycache"
    log = f"{base}/gateway.log"
    q = shlex.quote
    cmd = (f"rm -f {q(base)}/gateway.port; cat > {q(base)}/gateway.json || exit 1; cd {q(world.files.mount)} || exit 1; "
           f"{' '.join(q(f'{k}={v}') for k, v in env.items())} nohup {q(layout.python.executable)} "
           f"{q(scripts)}/world_gateway.py --config {q(base)}/gateway.json > {q(log)} 2>&1 < /dev/null & "
           f"echo $! > {q(base)}/gateway.pid")
    started = time.monotonic()
    result = await sandbox.exec(cmd, stdin=json.dumps(config), timeout=60)
    if not result.ok:
        raise WorldRuntimeError(f"could not start the world gateway: {(result.stderr or result.stdout)[-1000:]}")
    handle = GatewayHandle(port=port or 0, base=base, python=layout.python.executable, relay=f"{scripts}/http_relay.py",
                           log=log)
    health = await _wait_healthy(sandbox, handle, timeout)
    if health.get("error") == "exited":
        tail = await sandbox.exec(f"tail -c 3000 {q(log)}", timeout=30)
        raise WorldRuntimeError(f"the world gateway of {world.name!r} exited while starting:\n{tail.stdout}")
    if "error" in health:
        tail = await sandbox.exec(f"tail -c 3000 {q(log)}; for f in {q(base)}/servers/*.log; do [ -f \"$f\" ] && "
                                  f"printf '\\n--- %s ---\\n' \"$f\" && tail -c 1500 \"$f\"; done", timeout=30)
        raise McpGatewayError(f"the world gateway did not answer /health within {timeout:.0f}s (the last server it "
                              f"started is the one still starting; [runtime] startup_timeout_sec gives it longer)"
                              f"{'' if health['error'] == 'timeout' else ' (' + health['error'] + ')'}:\n{tail.stdout}")
    handle.port = int(health["port"])
    handle.tools = int(health.get("tools", 0))
    handle.listing = {k: ServerListing.model_validate(v) for k, v in (health.get("listing") or {}).items()}
    handle.startup_s = round(time.monotonic() - started, 3)
    if transport in ("auto", "http"):
        try:
            handle.url = (await sandbox.expose(port)).rstrip("/")
        except Exception as exc:
            if transport == "http":
                raise WorldRuntimeError(f"transport = 'http' but the sandbox cannot expose port {port}: {exc}") from exc
    return handle


async def _wait_healthy(sandbox: Sandbox, handle: GatewayHandle, timeout: float) -> dict[str, Any]:
    """``/health``'s answer, waited for inside the sandbox by the relay; ``{"error": "exited" | "timeout" | ...}``
    when the gateway died or did not answer in time."""
    request = json.dumps({"method": "GET", "path": "/health", "headers": [], "body": "", "port": handle.port,
                          "port_file": f"{handle.base}/gateway.port",
                          "wait": {"pid_file": f"{handle.base}/gateway.pid", "seconds": timeout}})
    result = await sandbox.exec([handle.python, handle.relay], stdin=request, timeout=timeout + 60)
    try:
        out = json.loads(result.stdout)
    except ValueError:
        return {"error": f"the relay said {(result.stderr or result.stdout)[-500:]!r}"}
    if "error" in out or out.get("status") != 200:
        return {"error": out.get("error") or f"status {out.get('status')}"}
    return json.loads(base64.b64decode(out["body"]))


__all__ = [
    "FilesSpec", "WorldTable", "task_world_dir",
    "GatewayHandle", "SandboxPython", "ServerSpec", "WorldLayout", "WorldSpec", "build_site", "install_world",
    "load_world", "probe_python", "start_gateway", "world_build",
]

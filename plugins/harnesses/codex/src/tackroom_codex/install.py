"""The pinned Codex build on the host: installed once from npm into tackroom's cache, then shipped into sandboxes.

``@openai/codex`` on npm is a small launcher; its optional dependencies carry one native build per platform
(``@openai/codex-linux-x64`` = ``@openai/codex@<version>-linux-x64``): a static musl ``codex`` binary, which runs on
any Linux userland (glibc or musl), and a static ``rg`` that Codex's shell guidance relies on. ``npm install`` with
the launcher fetches the one for this machine; nothing is fetched at trial time.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel

from tackroom import cache_root
from tackroom_agent_kit import NpmInstallError, ensure_npm_install, npm_arch
from tackroom_sandbox_kit import run_process

DEFAULT_VERSION = "0.171.0"
"""The Codex CLI release this plugin is tested with (its config keys are checked with ``--strict-config``)."""
PACKAGE = "@openai/codex"
_TRIPLES = {"x64": "x86_64-unknown-linux-musl", "arm64": "aarch64-unknown-linux-musl"}


class CodexInstall(BaseModel):
    """Where the host's copy of one Codex version lives."""

    version: str
    root: Path
    """The npm prefix (``<cache>/<version>``)."""
    binary: Path
    """The static ``codex`` executable for this machine."""
    ripgrep: Path
    """The static ``rg`` shipped with it."""


def default_cache_dir() -> Path:
    return cache_root() / "codex"


def vendor_dir(root: Path) -> Path:
    arch = npm_arch("Codex")
    return root / "node_modules" / "@openai" / f"codex-linux-{arch}" / "vendor" / _TRIPLES[arch]


def _ready(root: Path) -> bool:
    vendor = vendor_dir(root)
    return all((vendor / p).is_file() and os.access(vendor / p, os.X_OK) for p in ("bin/codex", "codex-path/rg"))


async def _check_version(binary: Path, version: str) -> None:
    out = await run_process([str(binary), "--version"], timeout=60, env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"})
    found = out.stdout.decode(errors="replace").strip()
    if out.returncode != 0 or found != f"codex-cli {version}":
        raise NpmInstallError(
            f"{binary} --version gave {found or out.stderr.decode(errors='replace').strip()[-500:]!r} "
            f"(exit {out.returncode}), expected 'codex-cli {version}'; remove {binary.parents[6]} and try again"
        )


async def ensure_installed(version: str = DEFAULT_VERSION, *, cache_dir: Path | None = None,
                           timeout: float = 600.0) -> CodexInstall:
    """Return the host install of ``version``, installing it with npm first if needed (once per machine)."""
    root = (cache_dir or default_cache_dir()) / version
    await ensure_npm_install([f"{PACKAGE}@{version}"], root, ready=_ready, timeout=timeout)
    vendor = vendor_dir(root)
    binary = vendor / "bin" / "codex"
    await _check_version(binary, version)
    return CodexInstall(version=version, root=root, binary=binary, ripgrep=vendor / "codex-path" / "rg")

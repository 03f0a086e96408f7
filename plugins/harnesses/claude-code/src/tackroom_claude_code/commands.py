"""``tackroom claude-code install``: put the pinned Claude Code build into the host cache ahead of a run."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tackroom_agent_kit.commands import install_app


def _install(version: str | None, cache_dir: Path | None, timeout: float) -> str:
    from tackroom_claude_code.install import DEFAULT_VERSION, ensure_installed

    found = asyncio.run(ensure_installed(version or DEFAULT_VERSION, cache_dir=cache_dir, timeout=timeout))
    return f"claude-code {found.version}: {found.binary}"


claude_code_app = install_app("Claude Code", package="@anthropic-ai/claude-code", cache_name="claude-code",
                              install=_install)

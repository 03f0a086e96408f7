"""Where the world's files are, and keeping every tool inside them."""

from __future__ import annotations

import os
from pathlib import Path

from mcp.server.mcpserver.exceptions import ToolError

DEFAULT_ROOT = "/workspace"


def root_from_env() -> Path:
    """``$WORLD_ROOT`` (set by the gateway) or ``/workspace``."""
    return Path(os.environ.get("WORLD_ROOT") or DEFAULT_ROOT)


class WorldPaths:
    """Maps the paths a model writes (``/workspace/hr/x.csv``, ``hr/x.csv``) onto the world root."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()
        self.mount = os.environ.get("WORLD_MOUNT") or DEFAULT_ROOT

    def resolve(self, path: str, *, must_exist: bool = True) -> Path:
        raw = (path or ".").strip()
        for prefix in (self.mount.rstrip("/") + "/", str(self.root) + "/"):
            if raw.startswith(prefix):
                raw = raw[len(prefix):]
        if raw in (self.mount, str(self.root)):
            raw = "."
        full = (self.root / raw.lstrip("/")).resolve()
        if full != self.root and not full.is_relative_to(self.root):
            raise ToolError(f"{path!r} is outside the workspace ({self.mount}); use a path inside it")
        if must_exist and not full.exists():
            raise ToolError(f"{path!r} does not exist; list the directory to see what is there")
        return full

    def show(self, full: Path) -> str:
        """The path as the model should see it (under the mount point)."""
        rel = full.resolve().relative_to(self.root).as_posix()
        return self.mount.rstrip("/") + ("/" + rel if rel != "." else "")

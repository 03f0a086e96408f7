"""Where tackroom keeps what it downloads, builds or converts once (engine venv, models, images, installs)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$TACKROOM_CACHE``, else ``$XDG_CACHE_HOME/tackroom``, else ``~/.cache/tackroom``.

    Every cache of tackroom and its first-party plugins lives under this one folder, so pointing
    ``TACKROOM_CACHE`` at an empty directory reproduces a fresh machine (CI does, on every run).
    """
    explicit = os.environ.get("TACKROOM_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tackroom"

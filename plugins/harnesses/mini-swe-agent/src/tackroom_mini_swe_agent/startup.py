"""What must hold before ``minisweagent`` is first imported: it reads its settings once, at import time.

At import mini-swe-agent prints a banner, creates its global config dir (``~/.config/mini-swe-agent`` by
default) and loads the ``.env`` there into the process's environment (model names, API keys, retry and cost
settings a user set for their own runs). A harness must not read or write the user's home, nor let those
settings change a trial, so the dir is a fresh private one of this process that holds nothing, and the banner is
off. litellm (mini-swe-agent's model client) reads its price list from the copy in its wheel instead of fetching
it. The modules that import ``minisweagent`` call :func:`prepare_import` first.
"""

from __future__ import annotations

import os
import sys
import tempfile

_CONFIG_DIR: str | None = None


def prepare_import() -> None:
    """Set mini-swe-agent's start-up variables for this process (idempotent; a no-op once it is imported)."""
    global _CONFIG_DIR
    if "minisweagent" in sys.modules or _CONFIG_DIR is not None:
        return
    _CONFIG_DIR = tempfile.mkdtemp(prefix="tackroom-mini-swe-agent-config-")
    os.environ["MSWEA_GLOBAL_CONFIG_DIR"] = _CONFIG_DIR
    os.environ["MSWEA_SILENT_STARTUP"] = "1"
    os.environ["MSWEA_CONFIGURED"] = "true"  # its `mini` CLI's first-run wizard (unused here) never asks
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

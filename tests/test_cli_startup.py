"""Every `tackroom` command loads every installed plugin's registration before it runs (the suite starts it as a
subprocess in ~40 places). That registration must not import the heavy libraries a plugin uses only when it runs:
each one costs every command its import (httpx, the MCP SDK, torch: each costs every command noticeable CPU)."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("httpx", "mcp", "litellm", "torch", "transformers", "jax", "ray", "numpy", "starlette", "uvicorn", "docker")

CODE = f"""
import runpy, sys
sys.argv = ["tackroom", "--help"]
try:
    runpy.run_module("tackroom_app", run_name="__main__")
except SystemExit as exc:
    assert exc.code in (0, None), exc.code
loaded = sorted({{name.split(".")[0] for name in sys.modules}} & set({HEAVY!r}))
print("LOADED", loaded, file=sys.stderr)
"""


def test_tackroom_help_with_every_plugin_installed_imports_no_heavy_library() -> None:
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Usage" in out.stdout and "run" in out.stdout  # the real CLI ran, with its commands listed
    assert out.stderr.strip().splitlines()[-1] == "LOADED []", out.stderr[-3000:]

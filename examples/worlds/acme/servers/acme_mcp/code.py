"""Code execution app: run a Python snippet in the workspace with a time limit.

Its one tool takes a single ``request`` object (the envelope shape many
Archipelago servers use); harnesses may hoist it to a flat schema.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel, Field

from acme_mcp.paths import root_from_env

MAX_OUTPUT = 20_000


class CodeRequest(BaseModel):
    """What to run."""

    code: str = Field(description="Python 3 source to execute; print what you want to see")
    timeout_seconds: int = Field(default=30, ge=1, le=120, description="Wall-clock limit")


def build_server(root: Path) -> MCPServer:
    server = MCPServer("code", instructions="Runs Python in the workspace (openpyxl, docx and pypdf are importable).")

    @server.tool()
    def run_python(request: CodeRequest) -> str:
        """Run Python code with the workspace as the working directory; returns exit code, stdout and stderr."""
        try:
            done = subprocess.run(
                [sys.executable, "-c", request.code], cwd=str(root), capture_output=True, text=True,
                timeout=request.timeout_seconds, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
            )
        except subprocess.TimeoutExpired as exc:
            out = (exc.stdout or b"")[-MAX_OUTPUT:]
            return f"timed out after {request.timeout_seconds}s\nstdout:\n{out.decode(errors='replace') if isinstance(out, bytes) else out}"
        text = f"exit code {done.returncode}\nstdout:\n{done.stdout[-MAX_OUTPUT:]}"
        if done.stderr:
            text += f"\nstderr:\n{done.stderr[-MAX_OUTPUT:]}"
        return text

    return server


if __name__ == "__main__":
    build_server(root_from_env()).run("stdio")

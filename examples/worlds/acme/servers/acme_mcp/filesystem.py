"""Filesystem app: list, read, write, search and move files in the workspace."""

from __future__ import annotations

import fnmatch
import shutil
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from acme_mcp.paths import WorldPaths, root_from_env

MAX_READ_CHARS = 200_000


def build_server(root: Path) -> MCPServer:
    paths = WorldPaths(root)
    server = MCPServer("filesystem", instructions="Files of the Acme workspace.")

    @server.tool()
    def list_directory(path: str = ".") -> str:
        """List a directory: one entry per line, directories end with '/', files show their size in bytes."""
        full = paths.resolve(path)
        if not full.is_dir():
            raise ToolError(f"{path!r} is a file, not a directory")
        lines = []
        for entry in sorted(full.iterdir()):
            if entry.is_dir():
                lines.append(f"{entry.name}/")
            else:
                lines.append(f"{entry.name}  ({entry.stat().st_size} bytes)")
        return "\n".join(lines) or "(empty directory)"

    @server.tool()
    def read_text_file(path: str) -> str:
        """Read a text file (md, csv, txt, json ...) and return its content."""
        full = paths.resolve(path)
        if full.is_dir():
            raise ToolError(f"{path!r} is a directory; use list_directory")
        data = full.read_bytes()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolError(
                f"{path!r} is not a text file; use the spreadsheets, documents or pdf tools for office files"
            ) from None
        return text[:MAX_READ_CHARS]

    @server.tool()
    def write_text_file(path: str, content: str) -> str:
        """Create or overwrite a text file (parent directories are created)."""
        full = paths.resolve(path, must_exist=False)
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(content, encoding="utf-8")
        return f"wrote {len(content.encode())} bytes to {paths.show(full)}"

    @server.tool()
    def search_files(pattern: str, path: str = ".") -> str:
        """Find files whose name matches a glob pattern (e.g. '*.xlsx'), searching below a directory."""
        base = paths.resolve(path)
        hits = [paths.show(p) for p in sorted(base.rglob("*")) if p.is_file() and fnmatch.fnmatch(p.name, pattern)]
        return "\n".join(hits) or f"no file matches {pattern!r}"

    @server.tool()
    def make_directory(path: str) -> str:
        """Create a directory (and its parents)."""
        full = paths.resolve(path, must_exist=False)
        full.mkdir(parents=True, exist_ok=True)
        return f"created {paths.show(full)}"

    @server.tool()
    def move_file(source: str, destination: str) -> str:
        """Move or rename a file or directory."""
        src = paths.resolve(source)
        dst = paths.resolve(destination, must_exist=False)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(src), str(dst))
        return f"moved {paths.show(src)} to {paths.show(dst)}"

    return server


if __name__ == "__main__":
    build_server(root_from_env()).run("stdio")

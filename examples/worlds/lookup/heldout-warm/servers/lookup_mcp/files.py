"""Read-only file tools over the world's files, as a stdio MCP server (the real SDK).

Run by the world gateway as ``python3 -m lookup_mcp.files`` (world.toml ``command``), or alone over stdio.
Paths may be given as the model sees them (``/workspace/notes/a.txt``) or relative to the world's root;
nothing outside the root is served (links included)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

MAX_CHARS = 20_000
MAX_HITS = 50


def framed(text: str) -> str:
    """A file's text as the ``--framed`` style shows it: a one-line value quoted in a sentence and the next step
    named (a 135M model copies a quoted value into ``final_answer`` far more often than a bare line, measured in
    the README); longer files as they are, with the same next step."""
    lines = text.strip().splitlines()
    if len(lines) == 1:
        value = lines[0].strip()
        kind = "the word " if value.isalpha() else ""
        return f'The file holds {kind}"{value}".\nCall final_answer with it.'
    return f"{text.rstrip()}\n\nFind what the task asks for above, then call final_answer with it."


def build_server(root: Path, mount: str = "/workspace", *, style: str = "plain") -> MCPServer:
    """``style``: ``plain`` returns a file's text as it is; ``framed`` as :func:`framed` shows it."""
    if style not in ("plain", "framed"):
        raise ValueError(f"unknown style {style!r}; styles: plain, framed")
    root = root.resolve()
    server = MCPServer("files", instructions=f"Read the files under {mount}.")
    read_before: set[Path] = set()  # one server per trial: what this episode has read

    def resolve(path: str) -> Path:
        text = (path or ".").strip()
        if text == mount or text.startswith(mount.rstrip("/") + "/"):
            text = text[len(mount):]
        full = (root / text.lstrip("/")).resolve()
        if not full.is_relative_to(root):
            raise ToolError(f"{path!r} is outside {mount}; every file is under {mount}")
        if not full.exists():
            raise ToolError(f"no such file or directory: {path!r}; list_directory shows what exists")
        return full

    def show(full: Path) -> str:
        rel = full.relative_to(root).as_posix()
        return mount.rstrip("/") + ("/" + rel if rel != "." else "")

    @server.tool()
    def list_directory(path: str = mount) -> str:
        """List the files in a directory, one per line (directories end with '/')."""
        full = resolve(path)
        if not full.is_dir():
            raise ToolError(f"{path!r} is a file; use read_file")
        entries = [f"{show(p)}/" if p.is_dir() else show(p) for p in sorted(full.iterdir())]
        return "\n".join(entries) or "(empty directory)"

    @server.tool()
    def read_file(path: str) -> str:
        """Read a text file and return its content."""
        full = resolve(path)
        if full.is_dir():
            raise ToolError(f"{path!r} is a directory; use list_directory")
        try:
            text = full.read_text(encoding="utf-8")[:MAX_CHARS]
        except UnicodeDecodeError:
            raise ToolError(f"{path!r} is not a text file") from None
        if style == "framed":
            text = framed(text)
        if full in read_before:  # a small model re-reads instead of answering: say what to do instead
            return f"{text}\n(You read this file before. If it holds what the task asks for, give it as your answer now.)"
        read_before.add(full)
        return text

    @server.tool()
    def grep(text: str, path: str = mount) -> str:
        """Find the lines that contain `text` (case-insensitive) in the files below `path`: file:line: content."""
        if not text.strip():
            raise ToolError("give the text to look for")
        base = resolve(path)
        needle = text.lower()
        hits = []
        for file in sorted([base] if base.is_file() else base.rglob("*")):
            if not file.is_file() or not file.resolve().is_relative_to(root):
                continue
            try:
                lines = file.read_text(encoding="utf-8").splitlines()
            except UnicodeDecodeError:
                continue
            hits += [f"{show(file)}:{n}: {line}" for n, line in enumerate(lines, 1) if needle in line.lower()]
            if len(hits) >= MAX_HITS:
                break
        return "\n".join(hits[:MAX_HITS]) or f"no line contains {text!r}"

    return server


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="The lookup world's read-only file tools over stdio")
    parser.add_argument("--framed", action="store_true", help="show one-line files as a quoted value and the next step")
    args = parser.parse_args()
    build_server(Path(os.environ.get("WORLD_ROOT", "/workspace")), os.environ.get("WORLD_MOUNT", "/workspace"),
                 style="framed" if args.framed else "plain").run("stdio")

"""The lookup worlds' stdio MCP server (examples/worlds/lookup/servers), through the real MCP SDK client:
read-only, nothing outside the world's root, and a re-read tells the model to answer instead."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

LOOKUP = Path(__file__).resolve().parents[4] / "examples" / "worlds" / "lookup"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "otter.txt").write_text("Q7K2ZP\n")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "app.log").write_text("INFO user=a request=AAA111\nERROR user=b request=BBB222\n")
    os.symlink("/etc/hostname", tmp_path / "notes" / "host.txt")
    return tmp_path


async def test_the_server_over_stdio(root):
    params = StdioServerParameters(command=sys.executable, args=["-m", "lookup_mcp.files"],
                                   env={"WORLD_ROOT": str(root), "WORLD_MOUNT": "/workspace",
                                        "PYTHONPATH": str(LOOKUP / "servers")})
    async with Client(params) as client:
        names = sorted(t.name for t in (await client.list_tools()).tools)
        listed = await client.call_tool("list_directory", {"path": "/workspace/notes"})
        first = await client.call_tool("read_file", {"path": "/workspace/notes/otter.txt"})
        again = await client.call_tool("read_file", {"path": "notes/otter.txt"})
        hits = await client.call_tool("grep", {"text": "user=b"})
        escape = await client.call_tool("read_file", {"path": "/workspace/../../etc/passwd"})
        link = await client.call_tool("read_file", {"path": "/workspace/notes/host.txt"})
        missing = await client.call_tool("read_file", {"path": "/workspace/notes/nope.txt"})
    assert names == ["grep", "list_directory", "read_file"]
    assert listed.content[0].text.splitlines() == ["/workspace/notes/host.txt", "/workspace/notes/otter.txt"]
    assert first.content[0].text == "Q7K2ZP\n" and not first.is_error
    assert again.content[0].text.startswith("Q7K2ZP\n\n(You read this file before.")
    assert hits.content[0].text == "/workspace/logs/app.log:2: ERROR user=b request=BBB222"
    for refused in (escape, link):
        assert refused.is_error and "outside /workspace" in refused.content[0].text
    assert missing.is_error and "list_directory shows what exists" in missing.content[0].text

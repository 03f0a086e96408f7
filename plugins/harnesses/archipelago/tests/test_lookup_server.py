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


async def test_the_framed_style_quotes_a_one_line_value_and_keeps_longer_files_whole(root):
    """``--framed`` (the rung a 135M model can copy from): a one-line file comes back as a quoted value and the next
    step; a longer file stays whole; errors and the re-read note are unchanged."""
    (root / "notes" / "fox.txt").write_text("guitar\n")
    params = StdioServerParameters(command=sys.executable, args=["-m", "lookup_mcp.files", "--framed"],
                                   env={"WORLD_ROOT": str(root), "WORLD_MOUNT": "/workspace",
                                        "PYTHONPATH": str(LOOKUP / "servers")})
    async with Client(params) as client:
        word = await client.call_tool("read_file", {"path": "/workspace/notes/fox.txt"})
        code = await client.call_tool("read_file", {"path": "/workspace/notes/otter.txt"})
        again = await client.call_tool("read_file", {"path": "/workspace/notes/fox.txt"})
        log = await client.call_tool("read_file", {"path": "/workspace/logs/app.log"})
        escape = await client.call_tool("read_file", {"path": "/workspace/../../etc/passwd"})
    assert word.content[0].text == 'The file holds the word "guitar".\nCall final_answer with it.'
    assert code.content[0].text == 'The file holds "Q7K2ZP".\nCall final_answer with it.'
    assert again.content[0].text.startswith('The file holds the word "guitar".') and "read this file before" in \
        again.content[0].text
    assert log.content[0].text.startswith("INFO user=a request=AAA111\nERROR user=b request=BBB222\n\nFind what")
    assert escape.is_error and "outside /workspace" in escape.content[0].text


def test_an_unknown_style_is_refused_naming_the_styles(tmp_path):
    sys.path.insert(0, str(LOOKUP / "servers"))
    try:
        from lookup_mcp.files import build_server
    finally:
        sys.path.remove(str(LOOKUP / "servers"))
    with pytest.raises(ValueError, match="unknown style 'fancy'; styles: plain, framed"):
        build_server(tmp_path, style="fancy")

"""Chat app: channels as JSON files (chat/<channel>.json, a list of {ts, user, text})."""

from __future__ import annotations

import json
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from acme_mcp.paths import WorldPaths, root_from_env

ME = "ops-bot"


def build_server(root: Path) -> MCPServer:
    paths = WorldPaths(root)
    server = MCPServer("chat", instructions="Acme's team chat.")

    def channel_file(channel: str) -> Path:
        name = channel.lstrip("#")
        full = paths.resolve(f"chat/{name}.json", must_exist=False)
        if not full.exists():
            known = ", ".join(sorted(p.stem for p in full.parent.glob("*.json"))) if full.parent.exists() else ""
            raise ToolError(f"no channel #{name}; channels are {known or 'none'}")
        return full

    @server.tool()
    def list_channels() -> str:
        """List the chat channels with their message counts."""
        folder = paths.resolve("chat", must_exist=False)
        rows = []
        for f in sorted(folder.glob("*.json")) if folder.exists() else []:
            rows.append(f"#{f.stem} ({len(json.loads(f.read_text()))} messages)")
        return "\n".join(rows) or "no channels"

    @server.tool()
    def read_channel(channel: str, limit: int = 50) -> str:
        """Read the newest messages of a channel, oldest first: '[time] user: text'."""
        messages = json.loads(channel_file(channel).read_text())
        return "\n".join(f"[{m['ts']}] {m['user']}: {m['text']}" for m in messages[-max(1, limit):]) or "(no messages)"

    @server.tool()
    def search_messages(query: str) -> str:
        """Search every channel for messages containing the query (case-insensitive)."""
        folder = paths.resolve("chat", must_exist=False)
        hits = []
        for f in sorted(folder.glob("*.json")) if folder.exists() else []:
            for m in json.loads(f.read_text()):
                if query.lower() in m["text"].lower():
                    hits.append(f"#{f.stem} [{m['ts']}] {m['user']}: {m['text']}")
        return "\n".join(hits) or f"no message contains {query!r}"

    @server.tool()
    def post_message(channel: str, text: str) -> str:
        """Post a message to a channel as ops-bot."""
        if not text.strip():
            raise ToolError("the message is empty")
        f = channel_file(channel)
        messages = json.loads(f.read_text())
        messages.append({"ts": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "user": ME, "text": text})
        f.write_text(json.dumps(messages, indent=2, ensure_ascii=False) + "\n")
        return f"posted to #{f.stem}"

    return server


if __name__ == "__main__":
    build_server(root_from_env()).run("stdio")

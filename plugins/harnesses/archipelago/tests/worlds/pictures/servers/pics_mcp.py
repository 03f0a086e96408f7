"""Image tools for the harness's tests: a real PNG reader and three hostile image results."""

from __future__ import annotations

import base64
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import ImageContent, TextContent


def build_server(root: Path) -> MCPServer:
    server = MCPServer("pics")

    @server.tool()
    def read_image(path: str) -> list[ImageContent | TextContent]:
        """Read a PNG under the world's folder and return it as an image."""
        full = (root / path.lstrip("/")).resolve()
        if not full.is_relative_to(root.resolve()):
            raise ValueError("outside the world")
        data = base64.b64encode(full.read_bytes()).decode()
        return [TextContent(type="text", text=f"{path}:"), ImageContent(type="image", data=data, mime_type="image/png")]

    @server.tool()
    def huge_image(chars: int = 400_000) -> list[ImageContent]:
        """An image far over any sane size."""
        return [ImageContent(type="image", data="A" * chars, mime_type="image/png")]

    @server.tool()
    def broken_image() -> list[ImageContent]:
        """Data that is not base64."""
        return [ImageContent(type="image", data="not base64 at all!*", mime_type="image/png")]

    @server.tool()
    def fake_image() -> list[ImageContent]:
        """Valid base64 of a text file, claimed to be a PNG."""
        return [ImageContent(type="image", data=base64.b64encode(b"#!/bin/sh\nrm -rf /\n").decode(), mime_type="image/png")]

    return server

"""The world gateway: every MCP server of a world behind one streamable-HTTP endpoint.

Runs inside the sandbox with the world's own Python (this file imports only the
standard library and the ``mcp`` SDK):

    python3 world_gateway.py --config /opt/tackroom-world/gateway.json

Servers are mounted with their tool names prefixed ``<server>_``. A server is
either a Python module with ``build_server(root) -> MCPServer`` (run in this
process) or a ``command`` speaking MCP over stdio (a child process, e.g. an MCP
server package from PyPI or npm). ``GET /health`` answers once every server is
mounted; the MCP endpoint is ``/mcp``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from mcp import Client, StdioServerParameters
from mcp.server.lowlevel import Server
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ListToolsResult, TextContent, Tool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

log = logging.getLogger("world-gateway")


class Mounted:
    """One server behind the gateway: its tools and how to call them."""

    def __init__(self, name: str, tools: list[Tool], call: Any, seconds: float = 0.0) -> None:
        self.name = name
        self.tools = tools
        self.call = call
        self.seconds = seconds
        """From the server's start (import or spawn) to its tool list."""


async def mount_module(name: str, module: str, root: Path) -> Mounted:
    started = time.monotonic()
    server = importlib.import_module(module).build_server(root)

    async def call(tool: str, args: dict[str, Any]) -> CallToolResult:
        try:
            return await server.call_tool(tool, args)
        except ToolError as exc:
            return CallToolResult(content=[TextContent(type="text", text=str(exc))], is_error=True)

    tools = await server.list_tools()
    return Mounted(name, tools, call, time.monotonic() - started)


def child_env(own: dict[str, str]) -> dict[str, str]:
    """What a stdio server gets besides the SDK's safe defaults (PATH, HOME, ...): the gateway's PYTHONPATH (the
    world's site with ``mcp`` and its [runtime] pythonpath), WORLD_ROOT and WORLD_MOUNT, then its own ``env``.
    Without it a Python server started as ``python3 -m pkg`` cannot import ``mcp`` or the world's packages."""
    inherited = {k: os.environ[k] for k in ("PYTHONPATH", "WORLD_ROOT", "WORLD_MOUNT") if os.environ.get(k)}
    return {**inherited, **own}


async def mount_command(name: str, spec: dict[str, Any], stack: contextlib.AsyncExitStack) -> Mounted:
    started = time.monotonic()
    command = spec["command"]
    params = StdioServerParameters(command=command[0], args=command[1:], env=child_env(spec.get("env") or {}),
                                   cwd=spec.get("cwd") or None)
    client = await stack.enter_async_context(Client(params, read_timeout_seconds=spec.get("timeout_sec", 600)))
    tools = (await client.list_tools()).tools

    async def call(tool: str, args: dict[str, Any]) -> CallToolResult:
        return await client.call_tool(tool, args)

    return Mounted(name, tools, call, time.monotonic() - started)


def build_gateway(mounted: list[Mounted], title: str) -> Server:
    routes: dict[str, tuple[Mounted, str]] = {}
    listed: list[Tool] = []
    for m in mounted:
        for tool in m.tools:
            public = f"{m.name}_{tool.name}"
            routes[public] = (m, tool.name)
            listed.append(tool.model_copy(update={"name": public}))

    async def on_list_tools(ctx: Any, params: Any) -> ListToolsResult:
        return ListToolsResult(tools=listed)

    async def on_call_tool(ctx: Any, params: Any) -> CallToolResult:
        route = routes.get(params.name)
        if route is None:
            known = ", ".join(sorted(routes))
            return CallToolResult(content=[TextContent(type="text", text=f"unknown tool {params.name!r}; tools: {known}")],
                                  is_error=True)
        server, tool = route
        return await server.call(tool, params.arguments or {})

    return Server(title, on_list_tools=on_list_tools, on_call_tool=on_call_tool)


async def serve(config: dict[str, Any]) -> None:
    root = Path(config["root"])
    os.environ.setdefault("WORLD_ROOT", str(root))
    os.environ.setdefault("WORLD_MOUNT", config.get("mount") or str(root))
    async with contextlib.AsyncExitStack() as stack:
        mounted = []
        for spec in config["servers"]:
            if spec.get("module"):
                mounted.append(await mount_module(spec["name"], spec["module"], root))
            else:
                mounted.append(await mount_command(spec["name"], spec, stack))
        gateway = build_gateway(mounted, config.get("name") or "world")
        tool_count = sum(len(m.tools) for m in mounted)

        async def health(request: Request) -> JSONResponse:
            return JSONResponse({"status": "ok", "servers": [m.name for m in mounted], "tools": tool_count,
                                 "listing": {m.name: {"tools": len(m.tools), "seconds": round(m.seconds, 3)}
                                             for m in mounted}})

        host = config.get("host", "127.0.0.1")
        app = gateway.streamable_http_app(json_response=True, host=host,
                                          custom_starlette_routes=[Route("/health", health, methods=["GET"])])
        server = uvicorn.Server(uvicorn.Config(app, host=host, port=int(config["port"]), log_level="warning",
                                               access_log=False, lifespan="on"))
        await server.serve()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="gateway.json written by the harness")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    anyio.run(serve, json.loads(Path(args.config).read_text()))


if __name__ == "__main__":
    main()

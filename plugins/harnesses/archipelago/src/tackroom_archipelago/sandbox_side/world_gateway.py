"""The world gateway: every MCP server of a world behind one streamable-HTTP endpoint.

Runs inside the sandbox with the world's own Python (this file imports only the
standard library and the ``mcp`` SDK):

    python3 world_gateway.py --config /opt/tackroom-world/gateway.json

Servers are mounted with their tool names prefixed ``<server>_``. A server is
either a Python module with ``build_server(root) -> MCPServer`` (run in this
process) or a ``command`` speaking MCP over stdio (a child process, e.g. an MCP
server package from PyPI or npm). Every stdio server starts at once, while the
module servers import one after another in a thread; ``GET /health`` answers
once every server has listed its tools; the MCP endpoint is ``/mcp``. A stdio
server's ``copy`` (``[source, dest]`` folders) is copied right before it starts:
its project out of a read-only build, to where it may write.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import os
import re
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread
import uvicorn
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
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
    # imported in a thread, so the stdio servers' start-up goes on meanwhile
    server = await anyio.to_thread.run_sync(lambda: importlib.import_module(module).build_server(root))

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
    inherited = {k: os.environ[k] for k in ("PYTHONPATH", "WORLD_ROOT", "WORLD_MOUNT", "PYTHONPYCACHEPREFIX")
                 if os.environ.get(k)}
    return {**inherited, **own}


class ServerStartError(Exception):
    """A stdio server that stopped (or failed) before it listed its tools; the message names it and quotes it."""


_MISSING_LIBRARY = re.compile(r"(lib[\w.+-]+\.so[.\d]*): cannot open shared object file")


def explain(output: str) -> str:
    """A line on what the server's own output says is missing from the sandbox, and how to provide it."""
    library = _MISSING_LIBRARY.search(output)
    if library:
        return (f"The sandbox image lacks the system library {library.group(1)}: run the task in an image that has "
                "it (a Dockerfile FROM the task's image that apt-get installs the package shipping it; "
                "`apt-file search` names the package).")
    if "No module named" in output:
        return ("A Python module is missing from the server's site: the project's pyproject.toml (and uv.lock) "
                "must name every package its code imports.")
    return ""


def tail(path: Path, limit: int = 2000) -> str:
    try:
        data = path.read_bytes()[-limit:]
    except OSError:
        return ""
    return data.decode(errors="replace").strip()


async def hold_command(name: str, spec: dict[str, Any], logs: Path | None, *,
                       task_status: anyio.abc.TaskStatus[Mounted] = anyio.TASK_STATUS_IGNORED) -> None:
    """Start one stdio server, list its tools (handed over through ``task_status``) and hold its session until the
    gateway stops. Its stderr goes to ``<logs>/<name>.log`` (its own, so a failure can quote it); one that dies
    first raises :class:`ServerStartError` naming it and quoting that log."""
    started = time.monotonic()
    if spec.get("copy"):
        source, dest = spec["copy"]
        await anyio.to_thread.run_sync(lambda: shutil.copytree(source, dest, symlinks=True, dirs_exist_ok=True))
    command = spec["command"]
    params = StdioServerParameters(command=command[0], args=command[1:], env=child_env(spec.get("env") or {}),
                                   cwd=spec.get("cwd") or None)
    log_path = (logs / f"{name}.log") if logs else None
    print(f"world gateway: starting server {name!r}: {' '.join(command)} (in {spec.get('cwd') or '.'}; its output: "
          f"{log_path or 'here'})", file=sys.stderr, flush=True)
    listed = False
    with contextlib.ExitStack() as files:
        errlog = files.enter_context(log_path.open("a", encoding="utf-8")) if log_path else sys.stderr
        try:
            async with Client(stdio_client(params, errlog=errlog),
                              read_timeout_seconds=spec.get("timeout_sec", 600)) as client:
                tools = (await client.list_tools()).tools
                listed = True

                async def call(tool: str, args: dict[str, Any]) -> CallToolResult:
                    return await client.call_tool(tool, args)

                task_status.started(Mounted(name, tools, call, time.monotonic() - started))
                await anyio.sleep_forever()
        except Exception as exc:
            if listed:  # it died later: its calls fail as tool errors, the other servers stay
                print(f"world gateway: server {name!r} stopped: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                return
            said = tail(log_path) if log_path else ""
            raise ServerStartError(
                f"server {name!r} ({' '.join(command)}) stopped before it listed its tools "
                f"({type(exc).__name__}: {exc}). {explain(said)}\nIts last output ({log_path}):\n{said or '(nothing)'}"
            ) from exc


async def mount_all(config: dict[str, Any], root: Path, logs: Path | None, holder: anyio.abc.TaskGroup) -> list[Mounted]:
    """Every server of ``config``, in its order: the stdio ones started at once (each held by a task of ``holder``),
    the module ones imported meanwhile."""
    specs = config["servers"]
    mounted: list[Mounted | None] = [None] * len(specs)

    async def command(i: int, spec: dict[str, Any]) -> None:
        mounted[i] = await holder.start(hold_command, spec["name"], spec, logs)

    async with anyio.create_task_group() as starting:
        for i, spec in enumerate(specs):
            if not spec.get("module"):
                starting.start_soon(command, i, spec)
        for i, spec in enumerate(specs):
            if spec.get("module"):
                mounted[i] = await mount_module(spec["name"], spec["module"], root)
    return [m for m in mounted if m is not None]


def start_error(exc: BaseException) -> ServerStartError | None:
    """The :class:`ServerStartError` inside ``exc`` (task groups wrap what their tasks raise)."""
    if isinstance(exc, ServerStartError):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = start_error(inner)
        if found is not None:
            return found
    return start_error(exc.__cause__) if exc.__cause__ is not None else None


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
    logs = Path(config["logs"]) if config.get("logs") else None
    if logs:
        logs.mkdir(parents=True, exist_ok=True)
    async with anyio.create_task_group() as holder:
        mounted = await mount_all(config, root, logs, holder)
        gateway = build_gateway(mounted, config.get("name") or "world")
        tool_count = sum(len(m.tools) for m in mounted)

        host = config.get("host", "127.0.0.1")
        sock = listening_socket(host, int(config.get("port") or 0), config.get("port_file"))
        port = sock.getsockname()[1]

        async def health(request: Request) -> JSONResponse:
            return JSONResponse({"status": "ok", "port": port, "servers": [m.name for m in mounted], "tools": tool_count,
                                 "listing": {m.name: {"tools": len(m.tools), "seconds": round(m.seconds, 3)}
                                             for m in mounted}})

        app = gateway.streamable_http_app(json_response=True, host=host,
                                          custom_starlette_routes=[Route("/health", health, methods=["GET"])])
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
        await server.serve(sockets=[sock])
        holder.cancel_scope.cancel()


def listening_socket(host: str, port: int, port_file: str | None) -> socket.socket:
    """The gateway's socket, bound before it serves: port 0 lets the kernel pick a free port, which goes to
    ``port_file`` (written whole, then renamed) for the relay to ask; no port drawn at random can be taken."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(False)
    if port_file:
        tmp = f"{port_file}.tmp"
        Path(tmp).write_text(str(sock.getsockname()[1]))
        os.replace(tmp, port_file)
    return sock


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="gateway.json written by the harness")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    try:
        anyio.run(serve, json.loads(Path(args.config).read_text()))
    except Exception as exc:
        found = start_error(exc)
        if found is None:
            raise
        print(f"world gateway: {found}", file=sys.stderr, flush=True)  # the reason, not the SDK's traceback
        sys.exit(3)


if __name__ == "__main__":
    main()

"""An HTTP transport that carries each request through ``Sandbox.exec`` to a server on the sandbox's loopback.

For sandboxes that cannot publish a port (the local bubblewrap sandbox without
network): the MCP SDK's streamable-HTTP client is given an ``httpx2`` client
with this transport, and every request runs ``http_relay.py`` inside the
sandbox. The world gateway answers with JSON (no server-initiated SSE stream),
so one exec per request is the whole exchange.
"""

from __future__ import annotations

import base64
import json

import httpx2

from tackroom import Sandbox, SandboxError


class SandboxExecTransport(httpx2.AsyncBaseTransport):
    """``httpx2`` transport: request → ``python3 http_relay.py`` in the sandbox → response."""

    def __init__(self, sandbox: Sandbox, *, port: int, python: str, relay: str, timeout: float = 600.0) -> None:
        self.sandbox = sandbox
        self.port = port
        self.python = python
        self.relay = relay
        self.timeout = timeout
        self.requests = 0

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.method == "GET" and request.url.path.rstrip("/").endswith("/mcp"):
            # A standing server-to-client SSE stream cannot ride on exec; the spec lets servers refuse it.
            return httpx2.Response(405, request=request)
        body = await request.aread()
        payload = json.dumps({
            "method": request.method,
            "path": request.url.raw_path.decode(),
            "headers": [[k, v] for k, v in request.headers.items() if k.lower() not in ("host", "content-length")],
            "body": base64.b64encode(body).decode(),
            "port": self.port,
            "timeout": self.timeout,
        })
        self.requests += 1
        try:
            result = await self.sandbox.exec([self.python, self.relay], stdin=payload, timeout=self.timeout + 30)
        except SandboxError as exc:
            raise httpx2.ConnectError(f"sandbox exec failed: {exc}", request=request) from exc
        if result.truncated:
            return _too_large(request, body, len(result.stdout))
        try:
            out = json.loads(result.stdout)
        except ValueError:
            raise httpx2.ConnectError(
                f"relay failed (exit {result.exit_code}): {(result.stderr or result.stdout)[-500:]}", request=request
            ) from None
        if "error" in out:
            raise httpx2.ConnectError(f"world gateway unreachable: {out['error']}", request=request)
        headers = [(k, v) for k, v in out["headers"] if k.lower() not in ("transfer-encoding", "content-length")]
        return httpx2.Response(out["status"], headers=headers, content=base64.b64decode(out["body"]), request=request)


def _too_large(request: httpx2.Request, body: bytes, kept: int) -> httpx2.Response:
    """The answer outgrew the sandbox's exec output cap: a JSON-RPC error for that request (the model is told,
    the session lives), not a broken transport (which the MCP client turns into a dead session)."""
    try:
        rpc_id = json.loads(body).get("id")
    except (ValueError, AttributeError):
        rpc_id = None
    if rpc_id is None:
        return httpx2.Response(202, request=request)
    message = (f"the answer was larger than this sandbox's exec output limit (cut at {kept:,} bytes): the world "
               "gateway is reached through Sandbox.exec here; ask for less (a smaller file, a page range)")
    return httpx2.Response(200, json={"jsonrpc": "2.0", "id": rpc_id, "error": {"code": -32603, "message": message}},
                           request=request)

"""The harness's MCP client: the world's tools over the MCP SDK, with timeouts and one reconnect.

Following the Mercor/SkyRL guide: a tool that times out, fails or returns
nothing is reported to the model as text and the episode goes on; a fatal
session error (session terminated, transport gone) reconnects once and retries
the call; a second fatal error ends the trial as an ``infra`` failure.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, ImageContent, TextContent, Tool
from pydantic import BaseModel, Field

from tackroom_archipelago.errors import McpGatewayError, WorldLostError
from tackroom_archipelago.images import DEFAULT_IMAGE_MAX_BYTES, ToolImage, read_image

FATAL_MESSAGES = ("session terminated", "not connected", "server disconnected", "failed to connect",
                  "timed out while waiting for response", "connection closed")


def is_fatal(exc: BaseException) -> bool:
    """True when the MCP session itself is dead (reconnect), False for an ordinary tool failure (tell the model)."""
    if isinstance(exc, BaseExceptionGroup):
        return any(is_fatal(e) for e in exc.exceptions)
    if isinstance(exc, (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, httpx2.TransportError)):
        return True
    if isinstance(exc, MCPError):
        return exc.code in (32600, -32600) or any(m in str(exc).lower() for m in FATAL_MESSAGES)
    if isinstance(exc, RuntimeError):
        return any(m in str(exc).lower() for m in FATAL_MESSAGES)
    return False


class ToolOutcome(BaseModel):
    """What one tool call gave the model."""

    text: str
    ok: bool
    kind: str
    """``ok``, ``tool_error`` (the tool said it failed), ``empty``, ``timeout``, ``mcp_error``, ``unknown_tool``."""
    duration_s: float = 0.0
    images: list[ToolImage] = Field(default_factory=list)
    """Images that passed the checks; ``text`` holds ``{IMAGE_SLOT}`` where each one was."""


IMAGE_SLOT = "\x00image\x00"
"""Where an image stood in a result's text; the harness replaces it with what the model is told."""


def result_text(result: CallToolResult, image_max_bytes: int = DEFAULT_IMAGE_MAX_BYTES) -> tuple[str, list[ToolImage]]:
    """The result's text with an :data:`IMAGE_SLOT` per kept image, and those images (a dropped one is a note)."""
    parts: list[str] = []
    images: list[ToolImage] = []
    for block in result.content or []:
        if isinstance(block, TextContent):
            parts.append(block.text.replace(IMAGE_SLOT, ""))
        elif isinstance(block, ImageContent):
            image = read_image(block, image_max_bytes)
            if isinstance(image, str):
                parts.append(image)
            else:
                images.append(image)
                parts.append(IMAGE_SLOT)
        else:
            parts.append(f"[{getattr(block, 'type', type(block).__name__)} content]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts), images


class WorldMcp:
    """A connected MCP client to the world gateway, re-creatable through ``factory``."""

    def __init__(self, factory: Callable[[], Client], *, connect_timeout: float = 60.0,
                 image_max_bytes: int = DEFAULT_IMAGE_MAX_BYTES) -> None:
        self.factory = factory
        self.image_max_bytes = image_max_bytes
        self.connect_timeout = connect_timeout
        self.client: Client | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self.reconnects = 0

    async def connect(self) -> None:
        # No cancel scope around entering: the client's task group outlives this call. The transport's
        # timeouts and the client's read timeout bound the handshake instead.
        stack = contextlib.AsyncExitStack()
        try:
            self.client = await stack.enter_async_context(self.factory())
        except Exception as exc:
            await stack.aclose()
            raise McpGatewayError(f"could not connect to the world's MCP endpoint: {type(exc).__name__}: {exc}") from exc
        self._stack = stack

    async def close(self) -> None:
        stack, self._stack, self.client = self._stack, None, None
        if stack is not None:
            # No cancel scope here either (see connect); the transport's timeouts bound the goodbye.
            with contextlib.suppress(Exception):
                await stack.aclose()

    async def reconnect(self) -> None:
        await self.close()
        self.reconnects += 1
        await self.connect()

    async def list_tools(self) -> list[Tool]:
        assert self.client is not None, "connect() first"
        try:
            with anyio.fail_after(self.connect_timeout):
                return list((await self.client.list_tools()).tools)
        except Exception as exc:
            if not is_fatal(exc) and not isinstance(exc, TimeoutError):
                raise
            await self.reconnect()
            return list((await self.client.list_tools()).tools)

    async def call(self, name: str, arguments: dict[str, Any], timeout: float) -> ToolOutcome:
        """Call a tool; every failure but a dead session comes back as text for the model. A session that dies in
        the call and does not come back is :class:`WorldLostError`: the model's call may have ended it."""
        try:
            return await self._call(name, arguments, timeout)
        except McpGatewayError as exc:
            raise WorldLostError(f"{exc}; it was lost in the model's tool call ({name}), and the model's calls run in "
                                 "the world and may have ended it (code execution, a kill): counted as the model's "
                                 "(reward 0, not retried)") from exc

    async def _call(self, name: str, arguments: dict[str, Any], timeout: float) -> ToolOutcome:
        started = time.monotonic()
        for attempt in (1, 2):
            assert self.client is not None, "connect() first"
            try:
                with anyio.fail_after(timeout):
                    result = await self.client.call_tool(name, arguments)
            except TimeoutError:
                return ToolOutcome(text=f"Tool {name} timed out after {timeout:g}s", ok=False, kind="timeout",
                                   duration_s=time.monotonic() - started)
            except Exception as exc:
                if is_fatal(exc):
                    if attempt == 2:
                        raise McpGatewayError(
                            f"the world's MCP session died twice (tool {name}): {type(exc).__name__}: {exc}"
                        ) from exc
                    await self.reconnect()
                    continue
                return ToolOutcome(text=f"Error calling tool {name}: {type(exc).__name__}: {exc}", ok=False,
                                   kind="mcp_error", duration_s=time.monotonic() - started)
            text, images = result_text(result, self.image_max_bytes)
            elapsed = time.monotonic() - started
            if result.is_error:
                return ToolOutcome(text=text or f"Tool {name} failed", ok=False, kind="tool_error", duration_s=elapsed,
                                   images=images)
            if not text.strip():
                return ToolOutcome(text=f"Tool {name} returned no content", ok=False, kind="empty", duration_s=elapsed)
            return ToolOutcome(text=text, ok=True, kind="ok", duration_s=elapsed, images=images)
        raise AssertionError("unreachable")

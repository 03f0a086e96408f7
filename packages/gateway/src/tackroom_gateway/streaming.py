"""The gateway's streaming plumbing: server-sent events, an engine stream moved into a queue (and the chunks that
queued up behind one taken together), a client that hung up and chat logprobs."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request

from tackroom_gateway.engine_client import EngineChunk


def sse(obj: dict[str, Any], event: str | None = None) -> bytes:
    """One server-sent event: ``obj`` as JSON data, under the event name ``event`` when the dialect uses names."""
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


class ClientGone(Exception):
    """The client closed its connection before the engine answered; nobody is left to answer."""


END = object()
"""The engine stream finished."""
CANCELLED = object()
"""The gateway cancelled the engine stream (session closed, gateway stopping)."""


async def client_gone(request: Request) -> None:
    """Return once the client has closed its connection (the ASGI ``http.disconnect`` message)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def pump_stream(chunks: AsyncIterator[EngineChunk], queue: asyncio.Queue[Any]) -> None:
    """Move an engine stream into ``queue``, ending with ``END``, the error, or ``CANCELLED``."""
    try:
        async for chunk in chunks:
            queue.put_nowait(chunk)
    except asyncio.CancelledError:
        queue.put_nowait(CANCELLED)
        raise
    except Exception as exc:
        queue.put_nowait(exc)
    else:
        queue.put_nowait(END)
    finally:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()


def queued_behind(first: EngineChunk, queue: asyncio.Queue[Any]) -> tuple[list[EngineChunk], Any]:
    """``first`` and the engine chunks already queued behind it, taken without waiting, to go out as one event: when
    the gateway falls behind the engine (or one read brought many events), the agent gets one event instead of one
    per token, with the same text and tokens. Also returns the item that stopped the taking (``END``, ``CANCELLED``
    or an error, to be handled after these chunks), or None when the queue ran empty."""
    pieces = [first]
    while not queue.empty():
        item = queue.get_nowait()
        if not isinstance(item, EngineChunk):
            return pieces, item
        pieces.append(item)
    return pieces, None


def chat_logprobs(tokens: list[str], values: list[float], tops: list[dict[str, float]]) -> dict[str, Any]:
    content = []
    for i, (tok, val) in enumerate(zip(tokens, values, strict=False)):
        top = tops[i] if i < len(tops) else {}
        content.append(
            {
                "token": tok,
                "logprob": val,
                "bytes": list(tok.encode()),
                "top_logprobs": [{"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in top.items()],
            }
        )
    return {"content": content}

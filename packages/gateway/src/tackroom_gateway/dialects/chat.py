"""OpenAI chat completions, the gateway's own dialect: requests pass through, answers are the turn's own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from tackroom_gateway.dialects.base import Dialect, DialectCall
from tackroom_gateway.errors import GatewayError
from tackroom_gateway.protocol import ChatCompletionRequest
from tackroom_gateway.streaming import sse
from tackroom_gateway.tito import TitoSession


class ChatDialect(Dialect):
    name = "chat completions"
    paths = ("/v1/chat/completions",)

    def parse(self, raw: bytes, session: TitoSession, path: dict[str, str]) -> DialectCall:
        req = ChatCompletionRequest.parse(raw)
        return DialectCall(request=req, body={}, session=session)

    def respond(self, call: DialectCall, completion: dict[str, Any]) -> dict[str, Any]:
        return completion

    async def events(self, call: DialectCall, chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
        usage = bool((call.request.stream_options or {}).get("include_usage"))
        try:
            async for chunk in chunks:
                if chunk["choices"] or usage:
                    yield sse(chunk)
        except GatewayError as exc:
            yield sse(exc.openai())
        yield b"data: [DONE]\n\n"


CHAT = ChatDialect()

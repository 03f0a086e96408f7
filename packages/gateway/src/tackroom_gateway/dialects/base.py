"""What a dialect is: a translation of one vendor API onto the gateway's chat turn, both ways.

The turn itself (prompt planning, engine call, tool-call parsing, token recording) is the chat handler's and is the
same for every dialect. A dialect only reads its request into a :class:`~tackroom_gateway.protocol.ChatCompletionRequest`
(messages, tools, sampling), shapes the finished chat completion into its own response, turns the stream of chat
completion chunks into its own events, and shapes errors as its clients expect them."""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.responses import JSONResponse

from tackroom_gateway.errors import GatewayError
from tackroom_gateway.protocol import ChatCompletionRequest
from tackroom_gateway.tito import TitoSession


@dataclass
class DialectCall:
    """One request in a dialect: the chat request it became, the dialect's own body and whatever the dialect needs
    to shape the answer (``state``)."""

    request: ChatCompletionRequest
    body: dict[str, Any]
    session: TitoSession
    state: dict[str, Any] = field(default_factory=dict)
    prompt_tokens: int | None = None
    """How many ids the turn's prompt has, set by the chat handler once it planned the turn (before any output:
    Anthropic's ``message_start`` reports it)."""
    count: Callable[[int], dict[str, Any]] | None = None
    """For a call that samples nothing (Messages' ``count_tokens``, Gemini's ``countTokens``): the dialect's answer
    from the number of ids the turn's prompt would have; the turn is planned as any other, never run or recorded."""


class Dialect(ABC):
    """A vendor API spoken by the gateway. ``name`` is how errors and logs refer to it."""

    name: str
    paths: tuple[str, ...]
    """The POST routes it answers, under a session's root (``/sessions/{sid}/{token}``) and under the gateway's
    root (admin token, default session); may hold path parameters (Gemini's ``{target}``)."""

    @abstractmethod
    def parse(self, raw: bytes, session: TitoSession, path: dict[str, str]) -> DialectCall:
        """Read a request body (``path``: the route's path parameters, over the URL's query parameters); raise
        :class:`~tackroom_gateway.errors.BadRequestError` for what the dialect refuses."""

    @abstractmethod
    def respond(self, call: DialectCall, completion: dict[str, Any]) -> dict[str, Any]:
        """The dialect's answer to ``call`` from the OpenAI ``chat.completion`` object the turn produced."""

    @abstractmethod
    def events(self, call: DialectCall, chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
        """The dialect's server-sent events from the turn's ``chat.completion.chunk`` objects (the last one carries
        ``usage`` and no choices). A :class:`GatewayError` raised by ``chunks`` mid-stream is already recorded; the
        events end with the dialect's error event (:meth:`error_event`)."""

    def error_body(self, exc: GatewayError) -> dict[str, Any]:
        """The dialect's error object for ``exc`` (an HTTP answer before any output)."""
        return exc.openai()

    def error_response(self, exc: GatewayError) -> JSONResponse:
        return JSONResponse(self.error_body(exc), status_code=exc.status_code, headers=exc.headers())

    async def stream(self, call: DialectCall, chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
        """:meth:`events`, with ``chunks`` closed whatever way the response ends (the client gone included), so
        that the engine request behind them is abandoned, never left running."""
        async with contextlib.aclosing(chunks):  # type: ignore[type-var]
            async for event in self.events(call, chunks):
                yield event

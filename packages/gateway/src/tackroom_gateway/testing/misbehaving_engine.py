"""A model engine that misbehaves on command, for tests of harnesses and gateways.

Infra faults must end a trial as ``infra``, never as the model's failure, and the
only way to test that is an engine that fails exactly when told to. This one
serves the OpenAI-compatible routes a harness or the policy gateway calls, on
127.0.0.1 in the test's own event loop:

* ``GET /v1/models`` (with ``max_model_len``),
* ``POST /v1/completions`` with vLLM's token-id extensions (``prompt`` as ids,
  ``return_token_ids``, ``logprobs``), plain or ``stream: true``,
* ``POST /v1/chat/completions``, plain or ``stream: true``,

and answers each completion request with the next :class:`EngineReply` of its
script (then ``then``, by default a plain success):

```python
async with MisbehavingEngine([EngineReply.rate_limited(retry_after=1), EngineReply.hang()]) as engine:
    ...  # point the gateway or harness at engine.base_url
    assert engine.requests[0].path == "/v1/completions"
```

Replies: ``ok`` (text and token ids, optionally breaking a stream after N
chunks), ``rate_limited`` (429 + ``Retry-After`` as seconds or an HTTP date),
``unavailable`` (503), ``error`` (any status and body, e.g. a 500 HTML page),
``hang`` (never answers; released when the client goes away or the engine
stops), ``close`` (drops the connection without a response), ``non_json`` and
``truncated_json`` (a 200 that is not a completion). ``fail_then_succeed(n, ...)``
scripts n failures and a success. It has no tokenizer: token ids come from the
reply, from ``encode`` (say a real tokenizer's), or are one id per UTF-8 byte.

The policy gateway's liveness probes (1-token completions it sends while requests
wait on a silent engine, marked ``user: tackroom-gateway-liveness-probe``) do not
take replies from the script: they get ``probe`` (default: ``then``, so an engine
whose ``then`` hangs hangs for probes too) and are recorded in ``probes``, not
``requests``. A healthy engine that is slow on one request is
``MisbehavingEngine([EngineReply.ok(..., delay_s=60)])``: the probes answer at once.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import format_datetime
from typing import Any, Literal

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tackroom_gateway.engine_client import PROBE_USER
from tackroom_gateway.testing._served import AsgiServedForTests

ReplyKind = Literal["ok", "status", "hang", "close", "raw"]


@dataclass(frozen=True)
class EngineReply:
    """What the engine does with one completion request. Build one with the class methods."""

    kind: ReplyKind = "ok"
    text: str = "Hello!"
    token_ids: tuple[int, ...] | None = None
    finish_reason: str = "stop"
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()
    delay_s: float = 0.0
    """Wait this long before doing it (unless the client goes away or the engine stops meanwhile)."""
    break_after_chunks: int | None = None
    """Streaming ``ok`` only: after this many events, ``break_with`` instead of finishing."""
    break_with: Literal["close", "non_json"] = "close"

    @classmethod
    def ok(cls, text: str = "Hello!", *, token_ids: Iterable[int] | None = None, finish_reason: str = "stop",
           delay_s: float = 0.0, break_after_chunks: int | None = None,
           break_with: Literal["close", "non_json"] = "close") -> EngineReply:
        """A completion of ``text`` (with ``token_ids``, else the engine's ``encode``)."""
        return cls("ok", text=text, token_ids=tuple(token_ids) if token_ids is not None else None,
                   finish_reason=finish_reason, delay_s=delay_s, break_after_chunks=break_after_chunks,
                   break_with=break_with)

    @classmethod
    def rate_limited(cls, retry_after: float | str | datetime | None = 1, *, delay_s: float = 0.0) -> EngineReply:
        """HTTP 429 with ``Retry-After`` (seconds, a literal header value, or a time sent as an HTTP date)."""
        return cls._error(429, "Too many requests: rate limit exceeded", "rate_limit_error", retry_after, delay_s)

    @classmethod
    def unavailable(cls, retry_after: float | str | datetime | None = None, *, status: int = 503,
                    delay_s: float = 0.0) -> EngineReply:
        """HTTP 503 (or another 5xx), with ``Retry-After`` when given."""
        return cls._error(status, "The engine is overloaded; try again later", "server_error", retry_after, delay_s)

    @classmethod
    def error(cls, status: int, body: str | bytes = "<html><body><h1>500 Internal Server Error</h1></body></html>",
              *, content_type: str = "text/html", delay_s: float = 0.0) -> EngineReply:
        """Any status with any body (default: a proxy's HTML 500 page)."""
        return cls("status", status=status, body=body.encode() if isinstance(body, str) else body,
                   content_type=content_type, delay_s=delay_s)

    @classmethod
    def hang(cls) -> EngineReply:
        """Never answer: the request stays open until the client goes away or the engine stops."""
        return cls("hang")

    @classmethod
    def close(cls, *, delay_s: float = 0.0) -> EngineReply:
        """Close the connection without sending a response, as a crashing engine does."""
        return cls("close", delay_s=delay_s)

    @classmethod
    def non_json(cls, body: str = "<html><body>Bad Gateway</body></html>", *, content_type: str = "text/html") -> EngineReply:
        """HTTP 200 whose body is not JSON."""
        return cls("raw", status=200, body=body.encode(), content_type=content_type)

    @classmethod
    def truncated_json(cls) -> EngineReply:
        """HTTP 200 with a completion's JSON cut off halfway (a complete HTTP message, an incomplete document)."""
        return cls("raw", status=200, body=b'{"id": "cmpl-1", "object": "text_completion", "choices": [{"index": 0, "te',
                   content_type="application/json")

    @classmethod
    def _error(cls, status: int, message: str, kind: str, retry_after: float | str | datetime | None,
               delay_s: float) -> EngineReply:
        headers: tuple[tuple[str, str], ...] = ()
        if isinstance(retry_after, datetime):
            headers = (("Retry-After", format_datetime(retry_after, usegmt=True)),)
        elif retry_after is not None:
            headers = (("Retry-After", str(retry_after)),)
        body = json.dumps({"error": {"message": message, "type": kind, "param": None, "code": status}}).encode()
        return cls("status", status=status, body=body, headers=headers, delay_s=delay_s)


@dataclass
class EngineRequest:
    """One request the engine received."""

    path: str
    body: dict[str, Any]
    reply: EngineReply
    received_at: float = field(default_factory=time.monotonic)
    client_went_away: bool = False
    """True when the client closed the connection while the engine was still holding the request."""


class MisbehavingEngine(AsgiServedForTests):
    """An OpenAI-compatible engine double on 127.0.0.1 that follows a script of :class:`EngineReply`.

    ``requests`` records every completion request (path, JSON body, the reply it got,
    whether its client went away while it was held); ``open_requests`` counts those
    still being answered (probes included). The gateway's liveness probes are answered with ``probe``
    (default: ``then``) and recorded in ``probes`` instead. ``stop()`` releases every
    held request first.
    """

    def __init__(
        self,
        script: Iterable[EngineReply] = (),
        *,
        then: EngineReply | None = None,
        probe: EngineReply | None = None,
        model: str = "misbehaving-engine",
        max_model_len: int | None = 4096,
        encode: Callable[[str], list[int]] | None = None,
        decode: Callable[[list[int]], str] | None = None,
    ) -> None:
        self.script: list[EngineReply] = list(script)
        self.then = then or EngineReply.ok()
        self.probe = probe
        """How liveness probes are answered; None: as ``then``."""
        self.max_model_len = max_model_len
        self.encode = encode
        self.decode = decode
        self.requests: list[EngineRequest] = []
        self.probes: list[EngineRequest] = []
        self.open_requests = 0
        app = Starlette(routes=[
            Route("/v1/models", self._models, methods=["GET"]),
            Route("/v1/completions", self._completions, methods=["POST"]),
            Route("/v1/chat/completions", self._chat, methods=["POST"]),
        ])
        self._serve(_RawSendKeeper(app), model=model, what="misbehaving engine", graceful_timeout_s=2)

    # -- script ---------------------------------------------------------------------
    def push(self, *replies: EngineReply) -> None:
        self.script.extend(replies)

    def fail_then_succeed(self, failures: int, failure: EngineReply | None = None,
                          success: EngineReply | None = None) -> None:
        """Script ``failures`` copies of ``failure`` (default: 503), then ``success`` (default: ``then``)."""
        self.push(*([failure or EngineReply.unavailable()] * failures), success or self.then)

    def _next(self) -> EngineReply:
        return self.script.pop(0) if self.script else self.then

    # -- helpers --------------------------------------------------------------------
    def _ids(self, reply: EngineReply) -> list[int]:
        if reply.token_ids is not None:
            return list(reply.token_ids)
        if self.encode is not None:
            return list(self.encode(reply.text))
        return list(reply.text.encode())

    def _token_text(self, ids: list[int]) -> list[str]:
        return [self.decode([i]) for i in ids] if self.decode is not None else [f"<{i}>" for i in ids]

    async def _hold(self, request: Request, record: EngineRequest, seconds: float | None = None) -> bool:
        """Hold the request for ``seconds`` (None: for ever) unless its client goes away or the engine
        stops first; True when either happened (then the request is not answered)."""
        if seconds is not None and seconds <= 0:
            return self._closing.is_set()
        gone = asyncio.ensure_future(_disconnected(request))
        closing = asyncio.ensure_future(self._closing.wait())
        try:
            await asyncio.wait({gone, closing}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
            record.client_went_away = gone.done()
            return gone.done() or closing.done()
        finally:
            gone.cancel()
            closing.cancel()

    # -- routes ---------------------------------------------------------------------
    async def _models(self, request: Request) -> Response:
        entry = {"id": self.model, "object": "model", "created": 0, "owned_by": "tests", "max_model_len": self.max_model_len}
        return JSONResponse({"object": "list", "data": [entry]})

    async def _completions(self, request: Request) -> Response:
        return await self._answer(request, chat=False)

    async def _chat(self, request: Request) -> Response:
        return await self._answer(request, chat=True)

    async def _answer(self, request: Request, *, chat: bool) -> Response:
        try:
            body = json.loads(await request.body() or b"{}")
        except ValueError:
            body = {}
        body = body if isinstance(body, dict) else {}
        if body.get("user") == PROBE_USER:
            reply = self.probe or self.then
            record = EngineRequest(path=request.url.path, body=body, reply=reply)
            self.probes.append(record)
        else:
            reply = self._next()
            record = EngineRequest(path=request.url.path, body=body, reply=reply)
            self.requests.append(record)
        self.open_requests += 1
        try:
            if await self._hold(request, record, reply.delay_s):
                return await _drop(request)
            if reply.kind == "hang":
                await self._hold(request, record)
                return await _drop(request)
            if reply.kind == "close":
                return await _drop(request)
            if reply.kind in ("status", "raw"):
                return Response(reply.body, status_code=reply.status, media_type=reply.content_type,
                                headers=dict(reply.headers))
            ids = self._ids(reply)
            stream = bool(record.body.get("stream"))
            if chat:
                return self._chat_stream(request, reply, ids) if stream else JSONResponse(self._chat_body(reply, ids))
            prompt = record.body.get("prompt")
            if stream:
                return self._completion_stream(request, reply, ids, prompt)
            return JSONResponse(self._completion_body(reply, ids, prompt))
        finally:
            self.open_requests -= 1

    def _logprobs(self, ids: list[int]) -> dict[str, Any]:
        tokens = self._token_text(ids)
        return {"tokens": tokens, "token_logprobs": [-0.5] * len(ids), "top_logprobs": [{t: -0.5} for t in tokens],
                "text_offset": [0] * len(ids)}

    def _completion_body(self, reply: EngineReply, ids: list[int], prompt: Any) -> dict[str, Any]:
        choice = {"index": 0, "text": reply.text, "logprobs": self._logprobs(ids), "finish_reason": reply.finish_reason,
                  "stop_reason": None, "token_ids": ids, "prompt_token_ids": prompt if isinstance(prompt, list) else None}
        return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                "model": self.model, "choices": [choice], "usage": _usage(prompt, ids)}

    def _chat_body(self, reply: EngineReply, ids: list[int]) -> dict[str, Any]:
        return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                "model": self.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": reply.text},
                             "finish_reason": reply.finish_reason}],
                "usage": _usage(None, ids)}

    def _completion_stream(self, request: Request, reply: EngineReply, ids: list[int], prompt: Any) -> Response:
        def event(k: int) -> dict[str, Any]:
            choice = {"index": 0, "text": reply.text if k == 0 else "", "logprobs": self._logprobs([ids[k]]),
                      "finish_reason": reply.finish_reason if k == len(ids) - 1 else None, "token_ids": [ids[k]]}
            if k == 0 and isinstance(prompt, list):
                choice["prompt_token_ids"] = prompt
            return {"id": "cmpl-stream", "object": "text_completion", "model": self.model, "choices": [choice]}

        return self._sse(request, reply, [event(k) for k in range(len(ids))])

    def _chat_stream(self, request: Request, reply: EngineReply, ids: list[int]) -> Response:
        head = {"role": "assistant", "content": ""}
        events = [{"delta": head, "finish_reason": None}, {"delta": {"content": reply.text}, "finish_reason": None},
                  {"delta": {}, "finish_reason": reply.finish_reason}]
        return self._sse(request, reply, [
            {"id": "chatcmpl-stream", "object": "chat.completion.chunk", "created": int(time.time()), "model": self.model,
             "choices": [{"index": 0, **e, "logprobs": None}]} for e in events
        ])

    def _sse(self, request: Request, reply: EngineReply, events: list[dict[str, Any]]) -> Response:
        async def body() -> AsyncIterator[bytes]:
            for k, item in enumerate(events):
                if reply.break_after_chunks is not None and k >= reply.break_after_chunks:
                    if reply.break_with == "non_json":
                        yield b"data: <html>upstream reset</html>\n\n"
                        return
                    await _drop(request)
                    return
                yield b"data: " + json.dumps(item).encode() + b"\n\n"
                await asyncio.sleep(0)
            yield b"data: [DONE]\n\n"

        return StreamingResponse(body(), media_type="text/event-stream")


def _usage(prompt: Any, ids: list[int]) -> dict[str, int]:
    n_prompt = len(prompt) if isinstance(prompt, list) else 0
    return {"prompt_tokens": n_prompt, "completion_tokens": len(ids), "total_tokens": n_prompt + len(ids)}


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


class _RawSendKeeper:
    """Keeps the server's own ``send`` in the scope, so a handler can find the connection to drop."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            scope["tackroom.raw_send"] = send
        await self.app(scope, receive, send)


async def _drop(request: Request) -> Response:
    """Close the client's connection without a response (or mid-response), then wait until it is gone.

    uvicorn's ``send`` is a method of the request cycle that owns the transport; with
    another server the connection is ended by an incomplete response instead.
    """
    send = request.scope.get("tackroom.raw_send")
    transport = getattr(getattr(send, "__self__", None), "transport", None)
    if transport is None:
        raise RuntimeError("MisbehavingEngine can drop connections only under uvicorn (tackroom_gateway.asgi_server)")
    transport.close()
    try:
        await asyncio.wait_for(_disconnected(request), 5)
    except TimeoutError:
        pass
    return Response(status_code=500)  # never sent: the connection is gone


__all__ = ["EngineReply", "EngineRequest", "MisbehavingEngine"]

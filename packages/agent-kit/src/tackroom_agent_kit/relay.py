"""A per-trial relay between an agent in the sandbox and the policy: forwards every request unchanged, and counts
the model calls.

Agents rarely have a hard turn limit (OpenCode's ``steps`` only asks the model for a text-only answer; a model that
keeps calling tools keeps it going), and most retry a failing endpoint for a minute or more. The relay gives the
harness both facts as they happen: it refuses the call after the last allowed turn (HTTP 400, which agents do not
retry) before it reaches the policy, counts failed calls (5xx, unreachable), and knows whether a call is in flight
(a slow model is not a hang). It serves the policy's whole root, so every dialect the gateway speaks passes
(chat completions, Responses, Messages, Gemini); bodies and streams pass byte for byte, so the gateway session
behind it records the same tokens as without it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, Literal

import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tackroom_gateway import InLoopServer

_HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}
TURN_LIMIT_CODE = "tackroom_turn_limit"
Dialect = Literal["chat", "completions", "responses", "messages", "gemini"]
_DIALECTS: tuple[tuple[str, Dialect], ...] = (
    ("/chat/completions", "chat"), ("/completions", "completions"), ("/responses", "responses"),
    ("/messages", "messages"), (":generateContent", "gemini"), (":streamGenerateContent", "gemini"))
"""Model-call path endings (under any prefix), one or two per dialect, the longer first; everything else
(``/models``, ``count_tokens``, ``countTokens``) passes without counting."""


def call_dialect(path: str) -> Dialect | None:
    """The API dialect of a model call to ``path``; None when ``path`` is no model call's."""
    p = path.rstrip("/")
    return next((dialect for suffix, dialect in _DIALECTS if p.endswith(suffix)), None)


def policy_root(base_url: str) -> str:
    """The root under which a policy serves its dialects: its OpenAI base URL without the trailing ``/v1``."""
    base = base_url.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


def is_model_call(method: str, path: str) -> bool:
    return method == "POST" and call_dialect(path) is not None


BodyFill = Callable[[str, dict[str, Any]], dict[str, Any]]
"""(path, JSON body) -> the body to forward."""


def filled(body: bytes, path: str, fill: BodyFill | None) -> bytes:
    """``body`` through ``fill``; a body that is not a JSON object passes unchanged (the policy answers it)."""
    if fill is None:
        return body
    try:
        doc = json.loads(body)
    except ValueError:
        return body
    if not isinstance(doc, dict):
        return body
    out = fill(path, doc)
    return body if out == doc else json.dumps(out, ensure_ascii=False).encode()


def missing_from(doc: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with each of ``defaults`` it does not set itself."""
    return {**doc, **{k: v for k, v in defaults.items() if doc.get(k) is None}}


def turn_limit_body(path: str, message: str) -> dict:
    """The turn-limit refusal in the error shape of the dialect ``path`` belongs to (a 400, which no agent retries)."""
    dialect = call_dialect(path)
    if dialect == "messages":
        return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    if dialect == "gemini":
        return {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": TURN_LIMIT_CODE}}


class ModelRelay:
    """Serves ``http://HOST:PORT/...`` and forwards every path to the same path under ``upstream``'s root
    (:func:`policy_root`: a policy's OpenAI base URL, ``.../v1``, or its root). :attr:`base_url` is the relay's
    OpenAI base URL, :attr:`root_url` its root (for agents that append ``/v1/...`` or ``/v1beta/...`` themselves)."""

    def __init__(self, upstream: str, *, max_calls: int | None, host: str = "127.0.0.1",
                 read_timeout_s: float = 900.0, what: str = "the agent", fill: BodyFill | None = None) -> None:
        self.upstream = policy_root(upstream)
        self.fill = fill
        """Applied to each model call's JSON body before it is forwarded (the agent's path, the body): an agent that
        cannot be told the policy's sampling settings gets them here."""
        self.max_calls = max_calls
        self.host = host
        self.calls = 0
        """Model calls forwarded (of any dialect)."""
        self.failures = 0
        """Calls the policy answered with a 5xx, or could not be reached for."""
        self.refused = 0
        """Calls refused because the turn limit was reached."""
        self._open: set[httpx.Response] = set()
        self.last_activity = time.monotonic()
        self.last_failure: str | None = None
        self._pending = 0
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=read_timeout_s))
        self.port: int | None = None
        self.app = Starlette(routes=[Route("/{path:path}", self._forward, methods=["GET", "POST"])])
        self._server = InLoopServer(self.app, what=f"the model relay for {what}", host=self.host,
                                    graceful_timeout_s=1, stop_timeout_s=5)

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    @property
    def in_flight(self) -> int:
        """Calls forwarded and not yet answered in full."""
        return self._pending + len(self._open)

    @property
    def limit_reached(self) -> bool:
        return self.refused > 0

    async def start(self) -> ModelRelay:
        self.port = await self._server.start()
        return self

    async def stop(self) -> None:
        await self._server.stop(force=True)
        for reply in list(self._open):
            await self._close(reply)
        await self._client.aclose()

    async def __aenter__(self) -> ModelRelay:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- forwarding --------------------------------------------------------------------
    async def _forward(self, request: Request) -> Response:
        path = request.path_params["path"]
        is_call = is_model_call(request.method, path)
        self.last_activity = time.monotonic()
        if is_call and self.max_calls is not None and self.calls >= self.max_calls:
            self.refused += 1
            message = f"tackroom: the episode's turn limit ({self.max_calls} model calls) is reached"
            return JSONResponse(turn_limit_body(path, message), status_code=400)
        if is_call:
            self.calls += 1
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
        upstream = httpx.URL(f"{self.upstream}/{path}", query=request.url.query.encode())
        self._pending += 1
        try:
            reply = await self._client.send(
                self._client.build_request(request.method, upstream, headers=headers,
                                           content=filled(await request.body(), path, self.fill) if is_call else
                                           await request.body()),
                stream=True,
            )
        except httpx.HTTPError as exc:
            self._failed(f"{type(exc).__name__}: {exc}")
            return JSONResponse({"error": {"message": f"policy unreachable: {exc}", "type": "server_error"}},
                                status_code=502)
        finally:
            self._pending -= 1
        self._open.add(reply)
        if reply.status_code >= 500:
            self._failed(f"HTTP {reply.status_code}")
        out_headers = {k: v for k, v in reply.headers.items() if k.lower() not in _HOP_HEADERS}
        return StreamingResponse(self._relay(reply), status_code=reply.status_code, headers=out_headers,
                                 background=BackgroundTask(self._close, reply))

    async def _relay(self, reply: httpx.Response):
        try:
            async for chunk in reply.aiter_raw():
                self.last_activity = time.monotonic()
                yield chunk
        except httpx.HTTPError as exc:
            self._failed(f"stream broke: {exc}")
        finally:
            await self._close(reply)

    async def _close(self, reply: httpx.Response) -> None:
        if reply in self._open:
            self._open.discard(reply)
            self.last_activity = time.monotonic()
            await reply.aclose()

    def _failed(self, why: str) -> None:
        self.failures += 1
        self.last_failure = why

"""The chat requests of a harness that talks to the teacher without the policy gateway, recorded on their way.

A text-only teacher (a hosted API, a chat-only scripted teacher) returns no token ids, and a harness's transcript
does not say which tools it declared; both are in the requests. :class:`ChatRecorder` is a pass-through proxy in
front of the teacher: each trial attempt gets its own URL (``/<session>/<secret>/v1``), every request is forwarded
unchanged (streams as they come), and each ``chat/completions`` exchange is kept: the request's ``messages``,
``tools`` and ``chat_template_kwargs`` and the assistant message the teacher answered (a streamed answer is put
together from its deltas). Exchanges become :class:`~tackroom_train.collect.recording.EngineCall` s without ids: a
request extends the earlier exchange whose messages and reply its messages start with, and one that does not
extend the newest exchange of that line starts a new branch, as the gateway decides its branches.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tackroom import TackroomError, Trajectory
from tackroom_train.collect.recording import EngineCall

_PASSED_HEADERS = ("authorization", "content-type", "accept", "anthropic-version", "x-api-key", "openai-beta")


@dataclass
class Exchange:
    """One chat request and the assistant message it was answered with."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    template_kwargs: dict[str, Any] | None
    reply: dict[str, Any] | None = None


@dataclass
class ChatRecorder:
    """``TrialPlugins.policy_for`` for a harness routed straight to the teacher (``endpoint``: its base URL); each
    trial's exchanges (its last attempt's) in :attr:`records` as engine calls. Serve it with :meth:`serving`.
    ``plugins`` are the trials' (their ``policy``, read per attempt, is what the proxy URL stands in for)."""

    endpoint: str
    plugins: Any
    records: dict[str, list[EngineCall]] = field(default_factory=dict)
    readable: bool = True
    base_url: str = ""
    _open: dict[str, tuple[str, list[Exchange]]] = field(default_factory=dict)
    _http: httpx.AsyncClient | None = None

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[ChatRecorder]:
        from tackroom_gateway import InLoopServer

        app = Starlette(routes=[Route("/{sid}/{secret}/v1/{path:path}", self._forward,
                                      methods=["GET", "POST", "PUT", "DELETE", "PATCH"])])
        server = InLoopServer(app, what="the collect recording proxy", graceful_timeout_s=1)
        async with httpx.AsyncClient(timeout=httpx.Timeout(None, connect=30)) as self._http:
            self.base_url = f"http://127.0.0.1:{await server.start()}"
            try:
                yield self
            finally:
                await server.stop()

    def __call__(self, trial: Any) -> contextlib.AbstractAsyncContextManager[Any]:
        return self._session(trial)

    @contextlib.asynccontextmanager
    async def _session(self, trial: Any) -> AsyncIterator[Any]:
        sid, secret, policy = secrets.token_hex(6), secrets.token_urlsafe(18), self.plugins.policy
        exchanges: list[Exchange] = []
        self._open[sid] = (secret, exchanges)
        try:
            yield _ProxySession(policy.model_copy(update={"base_url": f"{self.base_url}/{sid}/{secret}/v1"}),
                                lambda: self.records.__setitem__(trial.id, calls_of_exchanges(exchanges)))
        finally:
            self._open.pop(sid, None)

    async def _forward(self, request: Request) -> Response:
        sid, path = request.path_params["sid"], request.path_params["path"]
        held = self._open.get(sid)
        if held is None or not secrets.compare_digest(held[0], request.path_params["secret"]):
            return JSONResponse({"error": {"message": "no such session", "code": "session_not_found"}}, 404)
        body = await request.body()
        exchange = _exchange_of(body) if path.rstrip("/") == "chat/completions" else None
        headers = {k: v for k, v in request.headers.items() if k.lower() in _PASSED_HEADERS}
        assert self._http is not None
        upstream = self._http.build_request(request.method, f"{self.endpoint.rstrip('/')}/{path}", content=body,
                                            headers=headers, params=request.query_params)
        try:
            answer = await self._http.send(upstream, stream=True)
        except httpx.HTTPError as exc:
            return JSONResponse({"error": {"message": f"teacher unreachable: {type(exc).__name__}: {exc}",
                                           "code": "teacher_unavailable"}}, 503)
        kind = answer.headers.get("content-type", "")
        passed = {k: v for k, v in answer.headers.items() if k.lower() in ("content-type", "retry-after")}
        if exchange is not None and answer.status_code == 200:
            held[1].append(exchange)
        if "text/event-stream" in kind:
            return StreamingResponse(_relay(answer, exchange if answer.status_code == 200 else None),
                                     status_code=answer.status_code, headers=passed)
        content = await answer.aread()
        await answer.aclose()
        if exchange is not None and answer.status_code == 200:
            exchange.reply = _reply_of(content)
        return Response(content, status_code=answer.status_code, headers=passed)


class _ProxySession:
    """An attempt's session: its proxy URL; no verdict of its own on the teacher (the harness's error stands)."""

    def __init__(self, policy: Any, keep: Any) -> None:
        self.policy, self._keep = policy, keep

    async def settle(self) -> None:
        return None

    def error(self) -> TackroomError | None:
        return None

    def unrecovered_error(self) -> TackroomError | None:
        return None

    async def complete(self, trajectory: Trajectory) -> Trajectory:
        self._keep()
        return trajectory


def _exchange_of(body: bytes) -> Exchange | None:
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        return None
    tools = data.get("tools") if isinstance(data.get("tools"), list) else None
    kwargs = data.get("chat_template_kwargs") if isinstance(data.get("chat_template_kwargs"), dict) else None
    return Exchange(messages=[m for m in data["messages"] if isinstance(m, dict)], tools=tools or None,
                    template_kwargs=kwargs or None)


def _reply_of(content: bytes) -> dict[str, Any] | None:
    try:
        message = json.loads(content)["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    return message if isinstance(message, dict) else None


async def _relay(answer: httpx.Response, exchange: Exchange | None) -> AsyncIterator[bytes]:
    """The stream as it comes; the deltas put together into the exchange's reply."""
    reply: dict[str, Any] = {"role": "assistant", "content": ""}
    calls: dict[int, dict[str, Any]] = {}
    pending = b""
    try:
        async for chunk in answer.aiter_raw():
            yield chunk
            if exchange is None:
                continue
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                _add_delta(line, reply, calls)
    finally:
        await answer.aclose()
    if exchange is not None:
        if calls:
            reply["tool_calls"] = [calls[i] for i in sorted(calls)]
        exchange.reply = reply


def _add_delta(line: bytes, reply: dict[str, Any], calls: dict[int, dict[str, Any]]) -> None:
    if not line.startswith(b"data:") or line[5:].strip() == b"[DONE]":
        return
    try:
        delta = json.loads(line[5:])["choices"][0]["delta"]
    except (ValueError, KeyError, IndexError, TypeError):
        return
    for key in ("content", "reasoning_content"):
        if isinstance(delta.get(key), str):
            reply[key] = reply.get(key, "") + delta[key]
    for piece in delta.get("tool_calls") or []:
        call = calls.setdefault(int(piece.get("index", len(calls))),
                                {"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
        call["id"] = piece.get("id") or call["id"]
        fn = piece.get("function") or {}
        call["function"]["name"] += fn.get("name") or ""
        call["function"]["arguments"] += fn.get("arguments") or ""


# -- exchanges as engine calls ---------------------------------------------------------------------------
def _key(message: dict[str, Any]) -> tuple:
    """What must match for a message sent back to count as the one recorded (whitespace, JSON spacing aside)."""
    content = message.get("content")
    text = content if isinstance(content, str) else json.dumps(content, sort_keys=True) if content else ""
    calls = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        args = fn.get("arguments")
        with contextlib.suppress(TypeError, ValueError):
            args = json.loads(args) if isinstance(args, str) else args
        calls.append((fn.get("name"), json.dumps(args, sort_keys=True)))
    return message.get("role"), text.strip(), tuple(calls), message.get("tool_call_id")


def calls_of_exchanges(exchanges: list[Exchange]) -> list[EngineCall]:
    """The answered exchanges as engine calls (no ids), each with the exchange it extends and its branch."""
    answered = [e for e in exchanges if e.reply is not None]
    calls: list[EngineCall] = []
    tips: dict[int, int] = {}
    for k, exchange in enumerate(answered):
        keys = [_key(m) for m in exchange.messages]
        parent = None
        for j in range(k - 1, -1, -1):
            done = [*(_key(m) for m in answered[j].messages), _key(answered[j].reply or {})]
            if keys[: len(done)] == done and (parent is None or len(done) > parent[1]):
                parent = (j, len(done))
        if parent is not None and tips.get(calls[parent[0]].branch) == parent[0]:
            branch = calls[parent[0]].branch
        else:
            branch = max(tips, default=-1) + 1
        tips[branch] = k
        calls.append(EngineCall(index=k, prompt_ids=[], completion_ids=[], branch=branch,
                                parent=parent[0] if parent else None, messages=exchange.messages,
                                reply=exchange.reply, tools=exchange.tools, template_kwargs=exchange.template_kwargs,
                                tools_known=True))
    return calls

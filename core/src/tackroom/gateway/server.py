"""The policy gateway: an OpenAI-compatible ASGI app in front of an engine, token-in-token-out.

Routes (``{sid}`` is any session id the caller chooses; plain ``/v1/...`` is session ``default``):

* ``POST /sessions/{sid}/v1/chat/completions``: streaming (SSE) and not
* ``GET  /sessions/{sid}/v1/models`` and ``GET /v1/models``
* ``GET  /sessions/{sid}/trajectory``: the session's turns and flattened tokens
* ``DELETE /sessions/{sid}``: forget a session (returns its trajectory)
* ``GET  /sessions``, ``GET /health``

:class:`PolicyGateway` is the programmatic handle the trial runtime uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tackroom.asgi_server import InLoopServer
from tackroom.errors import TackroomError
from tackroom.gateway.chat_template import ChatTemplate
from tackroom.gateway.engine_client import EngineChunk, EngineClient, EngineCompletion, EngineSettings
from tackroom.gateway.errors import BadRequestError, ContextLengthExceededError, GatewayError, SessionNotFoundError
from tackroom.gateway.protocol import PASSTHROUGH, ChatCompletionRequest, forced_tool_call_tag
from tackroom.gateway.tito import PromptPlan, SessionSummary, TitoSession
from tackroom.gateway.tool_parsers import ParsedOutput, ToolParser, get_tool_parser
from tackroom.policy import Policy
from tackroom.trajectory import Trajectory

log = logging.getLogger("tackroom.gateway")


class GatewaySettings(BaseModel):
    """How to run a gateway."""

    engine: EngineSettings
    tokenizer: str = "smollm2"
    """A tokenizer folder, or ``smollm2``/``qwen3`` (materialised on first use)."""
    tool_parser: str = "auto"
    """``hermes``, ``qwen3`` or ``auto`` (``qwen3`` when the vocabulary has ``<think>``, else ``hermes``)."""
    model_name: str | None = None
    """Name advertised on ``/v1/models``; defaults to the engine's served model name."""
    host: str = "127.0.0.1"
    port: int = 0
    """0 picks a free port."""
    startup_timeout_s: float = 60.0


def _sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


def _error_response(exc: GatewayError) -> JSONResponse:
    return JSONResponse(exc.openai(), status_code=exc.status_code)


def _chat_logprobs(tokens: list[str], values: list[float], tops: list[dict[str, float]]) -> dict[str, Any]:
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


class PolicyGateway:
    """An OpenAI-compatible, token-in-token-out front for one engine; one per run.

    ``await gateway.start()`` serves on ``settings.host`` (loopback by default) and a
    free port; ``session_base_url(sid)`` is what a harness uses as its OpenAI base
    URL; ``trajectory(sid)`` returns the exact tokens that session produced;
    ``session_error(sid)`` the classified engine error that should decide the trial.
    """

    def __init__(
        self,
        settings: GatewaySettings,
        *,
        template: ChatTemplate | None = None,
    ) -> None:
        self.settings = settings
        self.template = template
        self.parser: ToolParser | None = None
        self.engine: EngineClient | None = None
        self.sessions: dict[str, TitoSession] = {}
        self._server: InLoopServer | None = None
        self.port: int | None = None
        self.app = Starlette(
            routes=[
                Route("/health", self._health, methods=["GET"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/sessions", self._list_sessions, methods=["GET"]),
                Route("/sessions/{sid}/v1/models", self._models, methods=["GET"]),
                Route("/sessions/{sid}/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/sessions/{sid}/trajectory", self._trajectory, methods=["GET"]),
                Route("/sessions/{sid}", self._close, methods=["DELETE"]),
            ],
            lifespan=self._lifespan,
        )

    # -- lifecycle ---------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        await self.prepare()
        try:
            yield
        finally:
            if self.engine is not None:
                await self.engine.aclose()
                self.engine = None

    async def prepare(self) -> None:
        """Load the tokenizer/template and ask the engine for its model; idempotent."""
        if self.template is None:
            self.template = await asyncio.to_thread(ChatTemplate.from_path, self.settings.tokenizer)
        if self.parser is None:
            name = self.settings.tool_parser
            if name == "auto":
                name = "qwen3" if self.template.think_tokens else "hermes"
            self.parser = get_tool_parser(name)
        if self.engine is None:
            self.engine = EngineClient(self.settings.engine)
        if self.engine.info is None:
            await self.engine.fetch_info()

    async def start(self) -> PolicyGateway:
        """Serve in this event loop; returns once the socket is bound (the port is then in ``self.port``)."""
        await self.prepare()
        self._server = InLoopServer(self.app, what="gateway", host=self.settings.host, port=self.settings.port,
                                    startup_timeout_s=self.settings.startup_timeout_s, error=GatewayError)
        self.port = await self._server.start()
        return self

    async def serve_until(self, stop: asyncio.Event) -> None:
        """Serve (``start()`` first) until ``stop`` is set or the server dies, then stop cleanly."""
        assert self._server is not None, "start() the gateway first"
        stopped = asyncio.create_task(stop.wait())
        died = asyncio.create_task(self._server.wait())
        try:
            done, _ = await asyncio.wait({stopped, died}, return_when=asyncio.FIRST_COMPLETED)
            if died in done and died.exception() is not None:
                raise GatewayError(f"the gateway stopped serving: {died.exception()}")
        finally:
            stopped.cancel()
            died.cancel()
            await self.stop()

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop()
            self._server = None
        if self.engine is not None:
            await self.engine.aclose()
            self.engine = None

    async def __aenter__(self) -> PolicyGateway:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- programmatic API ----------------------------------------------------------
    @property
    def base_url(self) -> str:
        if self.port is None:
            raise GatewayError("gateway not started: await gateway.start() first")
        host = "127.0.0.1" if self.settings.host in ("0.0.0.0", "") else self.settings.host
        return f"http://{host}:{self.port}"

    @property
    def model_name(self) -> str:
        if self.settings.model_name:
            return self.settings.model_name
        if self.engine is not None and self.engine.info is not None:
            return self.engine.info.model
        return self.settings.engine.model or "tackroom-policy"

    def session_base_url(self, session_id: str) -> str:
        """The OpenAI base URL (ending in ``/v1``) a harness uses for this session."""
        return f"{self.base_url}/sessions/{session_id}/v1"

    def policy(self, session_id: str, **overrides: Any) -> Policy:
        """A :class:`tackroom.Policy` pointing at this session."""
        return Policy(
            base_url=self.session_base_url(session_id),
            model=self.model_name,
            tokenizer=self.template.name_or_path if self.template else self.settings.tokenizer,
            **overrides,
        )

    def session(self, session_id: str) -> TitoSession:
        try:
            return self.sessions[session_id]
        except KeyError:
            raise SessionNotFoundError(
                f"no session {session_id!r}; sessions so far: {', '.join(sorted(self.sessions)) or 'none'}"
            ) from None

    def trajectory(self, session_id: str, branch: int | None = None) -> Trajectory:
        """The session's turns and the flattened tokens of ``branch`` (default: the newest turn's branch)."""
        return self.session(session_id).trajectory(branch)

    def session_error(self, session_id: str) -> TackroomError | None:
        """The classified engine error that should decide the trial (infra first), or None."""
        s = self.sessions.get(session_id)
        return s.worst_error() if s else None

    def close_session(self, session_id: str) -> Trajectory | None:
        """Forget a session; returns its trajectory (None if it never made a request)."""
        s = self.sessions.pop(session_id, None)
        return s.trajectory() if s and s.turns else None

    def _session_for(self, session_id: str) -> TitoSession:
        s = self.sessions.get(session_id)
        if s is None:
            assert self.template is not None
            s = self.sessions[session_id] = TitoSession(session_id, self.template)
        return s

    # -- routes ------------------------------------------------------------------------
    async def _health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "model": self.model_name, "engine": self.settings.engine.base_url})

    async def _models(self, request: Request) -> Response:
        info = self.engine.info if self.engine else None
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.model_name,
                        "object": "model",
                        "created": 0,
                        "owned_by": "tackroom",
                        "max_model_len": info.max_model_len if info else None,
                    }
                ],
            }
        )

    async def _list_sessions(self, request: Request) -> Response:
        rows = [
            SessionSummary(session_id=sid, turns=len(s.turns), branches=len(s.tips), errors=[str(e) for e in s.errors]).model_dump()
            for sid, s in self.sessions.items()
        ]
        return JSONResponse(rows)

    async def _trajectory(self, request: Request) -> Response:
        sid = request.path_params["sid"]
        branch = request.query_params.get("branch")
        try:
            traj = self.trajectory(sid, int(branch) if branch is not None else None)
        except GatewayError as exc:
            return _error_response(exc)
        except (KeyError, ValueError) as exc:
            return _error_response(BadRequestError(str(exc)))
        return Response(traj.model_dump_json(), media_type="application/json")

    async def _close(self, request: Request) -> Response:
        traj = self.close_session(request.path_params["sid"])
        return Response(traj.model_dump_json() if traj else "null", media_type="application/json")

    # -- chat completions --------------------------------------------------------------
    def _engine_body(self, req: ChatCompletionRequest, plan: PromptPlan) -> dict[str, Any]:
        assert self.engine is not None and self.template is not None
        extra = req.model_extra or {}
        body: dict[str, Any] = {"prompt": plan.prompt_ids}
        fields = {**extra, **req.model_dump(exclude_unset=True)}
        for key in PASSTHROUGH:
            if fields.get(key) is not None:
                body[key] = fields[key]
        info = self.engine.info
        room = (info.max_model_len - len(plan.prompt_ids)) if info and info.max_model_len else None
        if room is not None and room <= 0:
            raise ContextLengthExceededError(
                f"prompt is {len(plan.prompt_ids)} tokens, the engine's context is {info.max_model_len}; "  # type: ignore[union-attr]
                "shorten the conversation (or serve the model with a longer --max-model-len)"
            )
        wanted = req.max_completion_tokens or req.max_tokens
        body["max_tokens"] = min(wanted, room) if wanted and room else (wanted or room or 1024)
        stop_ids = list(req.stop_token_ids or [])
        if self.template.end_of_turn_id is not None and self.template.end_of_turn_id not in stop_ids:
            stop_ids.append(self.template.end_of_turn_id)
        body["stop_token_ids"] = stop_ids
        body["logprobs"] = max(req.top_logprobs or 0, 0) if req.logprobs else 0
        forced = req.forced_tool() if req.tools else None
        if req.tool_choice not in (None, "auto", "none") and not req.tools:
            raise BadRequestError(f"tool_choice {req.tool_choice!r} needs tools")
        if forced is not None:
            if "structured_outputs" in body or "response_format" in body:
                raise BadRequestError("tool_choice required/named cannot be combined with response_format or structured_outputs")
            tag = forced_tool_call_tag(req.tools or [], None if forced is True else forced)
            body["structured_outputs"] = {"structural_tag": json.dumps(tag, ensure_ascii=False)}
        return body

    def _reply(self, parsed: ParsedOutput) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": parsed.content}
        if parsed.reasoning is not None:
            msg["reasoning_content"] = parsed.reasoning
        if parsed.tool_calls:
            msg["tool_calls"] = [c.openai() for c in parsed.tool_calls]
        return msg

    @staticmethod
    def _finish_reason(engine_reason: str | None, parsed: ParsedOutput) -> str:
        if parsed.tool_calls and engine_reason != "length":
            return "tool_calls"
        return engine_reason or "stop"

    def _record(
        self, session: TitoSession, plan: PromptPlan, ids: list[int], logprobs: list[float] | None, reason: str | None, parsed: ParsedOutput
    ) -> dict[str, Any]:
        reply = self._reply(parsed)
        session.record(
            plan,
            completion_ids=ids,
            logprobs=logprobs,
            finish_reason=reason,
            reply=reply,
            tool_calls=len(parsed.tool_calls),
            tool_call_parse_failures=parsed.parse_failures,
        )
        return reply

    async def _chat(self, request: Request) -> Response:
        sid = request.path_params.get("sid", "default")
        session: TitoSession | None = None
        try:
            await self.prepare()
            assert self.engine is not None and self.parser is not None
            req = ChatCompletionRequest.parse(await request.body())
            session = self._session_for(sid)
            plan = session.plan(req.messages, tools=req.tools, template_kwargs=req.chat_template_kwargs)
            body = self._engine_body(req, plan)
            if req.stream:
                return await self._chat_stream(req, session, plan, body)
            result = await self.engine.complete(body)
        except GatewayError as exc:
            if session is not None and not isinstance(exc, BadRequestError):
                session.errors.append(exc)
            return _error_response(exc)
        return JSONResponse(self._chat_response(req, session, plan, result))

    def _chat_response(
        self, req: ChatCompletionRequest, session: TitoSession, plan: PromptPlan, result: EngineCompletion
    ) -> dict[str, Any]:
        assert self.parser is not None
        parsed = self.parser.parse(result.text, parse_tools=req.parse_tools)
        if result.prompt_ids is not None and result.prompt_ids != plan.prompt_ids:
            session.notes.append(f"turn {len(session.turns)}: engine echoed prompt ids that differ from those sent")
        reply = self._record(session, plan, result.completion_ids, result.logprobs, result.finish_reason, parsed)
        choice: dict[str, Any] = {
            "index": 0,
            "message": reply,
            "logprobs": _chat_logprobs(result.tokens or [], result.logprobs or [], result.top_logprobs or [])
            if req.logprobs
            else None,
            "finish_reason": self._finish_reason(result.finish_reason, parsed),
        }
        if req.return_token_ids:
            choice["token_ids"] = result.completion_ids
        out = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [choice],
            "usage": {
                "prompt_tokens": len(plan.prompt_ids),
                "completion_tokens": len(result.completion_ids),
                "total_tokens": len(plan.prompt_ids) + len(result.completion_ids),
            },
        }
        if req.return_token_ids:
            out["prompt_token_ids"] = plan.prompt_ids
        return out

    async def _chat_stream(
        self, req: ChatCompletionRequest, session: TitoSession, plan: PromptPlan, body: dict[str, Any]
    ) -> Response:
        assert self.engine is not None and self.parser is not None
        chunks = self.engine.stream(body)
        # Wait for the engine's first chunk so that failures before any output are plain HTTP errors.
        try:
            first: EngineChunk | None = await chunks.__anext__()
        except StopAsyncIteration:
            first = None
        return StreamingResponse(
            self._sse_events(req, session, plan, chunks, first),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def _sse_events(
        self,
        req: ChatCompletionRequest,
        session: TitoSession,
        plan: PromptPlan,
        chunks: AsyncIterator[EngineChunk],
        first: EngineChunk | None,
    ) -> AsyncIterator[bytes]:
        assert self.parser is not None
        stream_id = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        model = self.model_name

        def chunk(delta: dict[str, Any], finish: str | None = None, logprobs: dict | None = None) -> bytes:
            return _sse(
                {
                    "id": stream_id,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}],
                }
            )

        incremental = self.parser.stream(parse_tools=req.parse_tools)
        ids: list[int] = []
        logprobs: list[float] = []
        engine_reason: str | None = None
        yield chunk({"role": "assistant", "content": ""})
        try:
            pending = [first] if first is not None else []
            while True:
                if pending:
                    piece = pending.pop()
                else:
                    try:
                        piece = await chunks.__anext__()
                    except StopAsyncIteration:
                        break
                if piece.prompt_ids is not None and piece.prompt_ids != plan.prompt_ids:
                    session.notes.append(f"turn {len(session.turns)}: engine echoed prompt ids that differ from those sent")
                ids.extend(piece.token_ids)
                logprobs.extend(piece.logprobs)
                if piece.finish_reason is not None:
                    engine_reason = piece.finish_reason
                delta = incremental.feed(piece.text)
                out: dict[str, Any] = {}
                if delta.reasoning:
                    out["reasoning_content"] = delta.reasoning
                if delta.content:
                    out["content"] = delta.content
                lp = _chat_logprobs(piece.tokens, piece.logprobs, piece.top_logprobs) if req.logprobs else None
                if out or lp:
                    yield chunk(out, logprobs=lp)
        except GatewayError as exc:
            session.errors.append(exc)
            yield _sse(exc.openai())
            yield b"data: [DONE]\n\n"
            return
        finally:
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                await aclose()
        owed, parsed = incremental.finish()
        tail: dict[str, Any] = {}
        if owed.reasoning:
            tail["reasoning_content"] = owed.reasoning
        if owed.content:
            tail["content"] = owed.content
        if tail:
            yield chunk(tail)
        if parsed.tool_calls:
            yield chunk({"tool_calls": [c.openai(index=i) for i, c in enumerate(parsed.tool_calls)]})
        self._record(session, plan, ids, logprobs if len(logprobs) == len(ids) else None, engine_reason, parsed)
        yield chunk({}, finish=self._finish_reason(engine_reason, parsed))
        if (req.stream_options or {}).get("include_usage"):
            yield _sse(
                {
                    "id": stream_id,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": {
                        "prompt_tokens": len(plan.prompt_ids),
                        "completion_tokens": len(ids),
                        "total_tokens": len(plan.prompt_ids) + len(ids),
                    },
                }
            )
        yield b"data: [DONE]\n\n"


def build_gateway(
    engine_url: str,
    *,
    tokenizer: str = "smollm2",
    model: str | None = None,
    tool_parser: str = "auto",
    host: str = "127.0.0.1",
    port: int = 0,
    **engine_options: Any,
) -> PolicyGateway:
    """A :class:`PolicyGateway` from the few values a caller usually has."""
    return PolicyGateway(
        GatewaySettings(
            engine=EngineSettings(base_url=engine_url, model=model, **engine_options),
            tokenizer=tokenizer,
            tool_parser=tool_parser,
            model_name=model,
            host=host,
            port=port,
        )
    )


__all__ = ["GatewaySettings", "PolicyGateway", "build_gateway"]

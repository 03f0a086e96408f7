"""The policy gateway: an OpenAI-compatible ASGI app in front of an engine, token-in-token-out.

Routes. ``{sid}/{token}`` is a session's id and its unguessable token (the
session's base URL is ``/sessions/{sid}/{token}/v1``); *admin* routes need
``Authorization: Bearer <admin token>`` (random per gateway, never given to agents):

* ``POST /sessions/{sid}/{token}/v1/chat/completions``: streaming (SSE) and not
* ``GET  /sessions/{sid}/{token}/v1/models`` and ``GET /v1/models``
* ``GET  /sessions/{sid}/{token}/trajectory``: the session's own turns and flattened tokens
* admin: ``POST /sessions`` (create one: ``{"session_id", "base_url"}``), ``GET /sessions``,
  ``GET /sessions/{sid}/trajectory``, ``DELETE /sessions/{sid}``, ``POST /v1/chat/completions``
  (session ``default``)
* ``GET /health``

Every failure is answered as an OpenAI error, ``{"error": {"message", "type", "param", "code"}}``.
:class:`PolicyGateway` is the programmatic handle the trial runtime uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tackroom import Policy, TackroomError, Trajectory
from tackroom_gateway.asgi_server import InLoopServer
from tackroom_gateway.auth import check_admin, session_at
from tackroom_gateway.chat_template import ChatTemplate, ChatTemplateError
from tackroom_gateway.engine_client import EngineClient, EngineCompletion, EngineSettings
from tackroom_gateway.errors import (
    BadRequestError,
    ContextLengthExceededError,
    EngineRequestInterruptedError,
    GatewayError,
    GatewayInternalError,
    SessionNotFoundError,
)
from tackroom_gateway.liveness import EngineLiveness
from tackroom_gateway.protocol import PASSTHROUGH, ChatCompletionRequest, forced_tool_call_tag
from tackroom_gateway.streaming import (
    CANCELLED,
    END,
    ClientGone,
    chat_logprobs,
    client_gone,
    error_response,
    pump_stream,
    sse,
)
from tackroom_gateway.tito import OpenRequest, PromptPlan, SessionSummary, TitoSession
from tackroom_gateway.tool_parsers import ParsedOutput, ToolParser, get_tool_parser

log = logging.getLogger("tackroom_gateway")

SESSION_ID = re.compile(r"(?!\.+$)[A-Za-z0-9_.-]{1,512}")
"""What a session id may be: it is a URL path segment (so not ``.`` or ``..``)."""


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


class PolicyGateway:
    """An OpenAI-compatible, token-in-token-out front for one engine; one per run.

    ``await gateway.start()`` serves on ``settings.host`` (loopback by default) and a
    free port; ``session_base_url(sid)`` opens a session and returns the OpenAI base
    URL a harness uses for it (with the session's token in the path);
    ``trajectory(sid)`` returns the exact tokens that session produced;
    ``session_error(sid)`` the classified engine error that should decide the trial.
    While requests wait on the engine, ``liveness`` probes it when it has been silent
    for ``probe_interval_s`` (:mod:`tackroom_gateway.liveness`): that, not the agent's
    behaviour, decides whether a request still open when a turn ended is infra.
    ``admin_token`` (random unless given) guards the routes that list, read and delete
    any session; it is for the gateway's owner, never for an agent.
    """

    def __init__(
        self,
        settings: GatewaySettings,
        *,
        template: ChatTemplate | None = None,
        admin_token: str | None = None,
    ) -> None:
        self.settings = settings
        self.template = template
        self.admin_token = admin_token or secrets.token_urlsafe(32)
        self.parser: ToolParser | None = None
        self.engine: EngineClient | None = None
        self.sessions: dict[str, TitoSession] = {}
        self.liveness = EngineLiveness(settings.engine.probe_interval_s, settings.engine.probe_timeout_s)
        self._watch: asyncio.Task[None] | None = None
        self._server: InLoopServer | None = None
        self._stopping = False
        self.port: int | None = None
        g = self._guarded
        self.app = Starlette(
            routes=[
                Route("/health", g(self._health), methods=["GET"]),
                Route("/v1/models", g(self._models), methods=["GET"]),
                Route("/v1/chat/completions", g(self._chat_default), methods=["POST"]),
                Route("/sessions", g(self._list_sessions), methods=["GET"]),
                Route("/sessions", g(self._create_session), methods=["POST"]),
                Route("/sessions/{sid}/trajectory", g(self._trajectory_admin), methods=["GET"]),
                Route("/sessions/{sid}", g(self._close), methods=["DELETE"]),
                Route("/sessions/{sid}/{token}/v1/models", g(self._session_models), methods=["GET"]),
                Route("/sessions/{sid}/{token}/v1/chat/completions", g(self._chat_session), methods=["POST"]),
                Route("/sessions/{sid}/{token}/trajectory", g(self._trajectory_own), methods=["GET"]),
            ],
            exception_handlers={HTTPException: self._http_error},
            lifespan=self._lifespan,
        )

    # -- lifecycle ---------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        await self.prepare()
        try:
            yield
        finally:
            await self._stop_watch()
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
        self._stopping = False
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
        """Stop serving: engine requests still open are cut off (their clients get a 503), then the server exits."""
        self._stopping = True
        for s in self.sessions.values():
            s.cancel_open_requests("the gateway stopped", turn_ended=False)
        await self._stop_watch()
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

    # -- engine liveness -------------------------------------------------------------
    def _oldest_open_request(self) -> float | None:
        starts = [e.started for s in self.sessions.values() for e in s.inflight.values()]
        return min(starts) if starts else None

    def _track(self, session: TitoSession, work: asyncio.Future[Any]) -> OpenRequest:
        """``session`` waits on the engine through ``work``; the liveness watch runs while anyone does."""
        entry = session.request_started(work)
        if (self._watch is None or self._watch.done()) and not self._stopping:
            assert self.template is not None
            eot = self.template.end_of_turn_id
            self._watch = asyncio.ensure_future(
                self.liveness.watch(lambda: self.engine, self._oldest_open_request, [eot if eot is not None else 0])
            )
        return entry

    async def _stop_watch(self) -> None:
        watch, self._watch = self._watch, None
        if watch is not None and not watch.done():
            watch.cancel()
            await asyncio.wait({watch})  # a probe in flight is let go at once; the watch itself never raises

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

    def open_session(self, session_id: str | None = None) -> TitoSession:
        """The session with this id, created (with a fresh token) if there is none; a random id when None."""
        sid = session_id if session_id is not None else uuid.uuid4().hex
        if not SESSION_ID.fullmatch(sid):
            raise BadRequestError(
                f"session id {sid[:80]!r} is not 1-512 characters of letters, digits, '_', '.' and '-' (nor only dots)"
            )
        s = self.sessions.get(sid)
        if s is None:
            if self.template is None:
                raise GatewayError("gateway not prepared: await gateway.start() before opening sessions")
            s = self.sessions[sid] = TitoSession(sid, self.template, engine_failure=self.liveness.failure)
        return s

    def session_base_url(self, session_id: str) -> str:
        """The OpenAI base URL (``.../sessions/{id}/{token}/v1``) a harness uses; opens the session if needed."""
        base = self.base_url
        s = self.open_session(session_id)
        return f"{base}/sessions/{s.session_id}/{s.token}/v1"

    def policy(self, session_id: str, **overrides: Any) -> Policy:
        """A :class:`tackroom.Policy` pointing at this session (opened if needed)."""
        return Policy(
            base_url=self.session_base_url(session_id),
            model=self.model_name,
            tokenizer=self.template.name_or_path if self.template else self.settings.tokenizer,
            **overrides,
        )

    def trial_sessions(self, *, sampling: dict[str, Any] | None = None, label: str | None = None) -> Any:
        """``TrialPlugins.policy_for``: a fresh session of this gateway per trial attempt
        (:class:`~tackroom_gateway.trial_sessions.GatewaySessions`; what ``tackroom_policy_gateway`` promises)."""
        from tackroom_gateway.trial_sessions import GatewaySessions

        return GatewaySessions(self, sampling=sampling, label=label)

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
        """The classified error that should decide the trial (see ``TitoSession.worst_error``), or None.

        An engine request still open when this is asked (the agent's turn ended while
        the engine was working) is an infra error if the engine is not answering its
        liveness probes, and nothing (the model's own long generation) if it is.
        """
        s = self.sessions.get(session_id)
        return s.worst_error() if s else None

    async def settle_session(self, session_id: str) -> None:
        """Before :meth:`session_error` is asked at the end of a turn: when an engine request of the session was
        open at the end (still open, or cut off then) and nothing has shown since it was sent whether the engine
        answers (no probe, no output), send one last probe and wait for it (``probe_timeout_s`` at most).

        Without it a turn shorter than ``probe_interval_s`` that ends waiting on a silent engine would leave no
        verdict, and the agent's timeout would count as the model's failure; with it, a silent engine is
        ``infra`` at any agent timeout."""
        s = self.sessions.get(session_id)
        if s is None or self.engine is None or self.template is None:
            return
        since = s.unsettled_since()
        if since is None:
            return
        p, answered = self.liveness.last_probe, self.liveness.last_answer_at
        if (p is not None and p.sent_at >= since) or (answered is not None and answered >= since):
            return  # a probe sent, or output produced, after the request went out: the verdict exists
        eot = self.template.end_of_turn_id
        await self.liveness.probe(self.engine, [eot if eot is not None else 0])

    def close_session(self, session_id: str) -> Trajectory | None:
        """Forget a session (its URL stops working, its open engine requests are cut off); returns its
        trajectory (None if it never finished a turn)."""
        s = self.sessions.pop(session_id, None)
        if s is None:
            return None
        s.cancel_open_requests("the session was closed")
        return s.trajectory() if s.turns else None

    # -- access ------------------------------------------------------------------------
    def _check_admin(self, request: Request) -> None:
        check_admin(request, self.admin_token)

    def _session_at(self, request: Request) -> TitoSession:
        """The session a ``/sessions/{sid}/{token}/...`` URL names, if the token is its own."""
        return session_at(request, self.sessions)

    def _guarded(self, handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        """Every failure of ``handler`` becomes an OpenAI-shaped answer; nothing escapes to uvicorn's log."""

        async def endpoint(request: Request) -> Response:
            try:
                return await handler(request)
            except GatewayError as exc:
                return error_response(exc)
            except asyncio.CancelledError:
                # The request's task itself was cancelled (a hard server stop). Answer rather than let
                # uvicorn log a CancelledError traceback: nothing awaits this task's result.
                return error_response(EngineRequestInterruptedError("the gateway is stopping"))
            except Exception as exc:
                log.error("gateway: %s failed: %s: %s", handler.__name__, type(exc).__name__, exc)
                log.debug("gateway: %s failed", handler.__name__, exc_info=True)
                return error_response(GatewayInternalError(
                    f"the gateway failed on this request ({type(exc).__name__}: {exc}); this is a bug in tackroom's gateway"
                ))

        endpoint.__name__ = handler.__name__
        return endpoint

    async def _http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 404:
            message = (f"no route {request.method} {request.url.path}: a session's base URL is "
                       "/sessions/{id}/{token}/v1 (POST /sessions with the admin token creates one)")
            code, kind = "not_found", "not_found_error"
        elif exc.status_code == 405:
            message, code, kind = f"{request.method} is not allowed here", "method_not_allowed", "invalid_request_error"
        else:
            message, code, kind = str(exc.detail), f"http_{exc.status_code}", "invalid_request_error"
        body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    # -- routes ------------------------------------------------------------------------
    async def _health(self, request: Request) -> Response:
        return JSONResponse({"status": "stopping" if self._stopping else "ok", "model": self.model_name})

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

    async def _session_models(self, request: Request) -> Response:
        self._session_at(request)
        return await self._models(request)

    def _session_urls(self, request: Request, s: TitoSession) -> dict[str, str]:
        base = f"{str(request.base_url).rstrip('/')}/sessions/{s.session_id}/{s.token}"
        return {"session_id": s.session_id, "base_url": f"{base}/v1", "trajectory_url": f"{base}/trajectory"}

    async def _create_session(self, request: Request) -> Response:
        self._check_admin(request)
        raw = await request.body()
        data: Any = {}
        if raw.strip():
            try:
                data = json.loads(raw)
            except ValueError as exc:
                raise BadRequestError(f'body must be empty or JSON like {{"session_id": "..."}}: {exc}') from exc
        if not isinstance(data, dict) or not isinstance(data.get("session_id", ""), str):
            raise BadRequestError('body must be empty or a JSON object like {"session_id": "..."}')
        sid = data.get("session_id") or None
        existed = sid in self.sessions
        s = self.open_session(sid)
        return JSONResponse(self._session_urls(request, s), status_code=200 if existed else 201)

    async def _list_sessions(self, request: Request) -> Response:
        self._check_admin(request)
        rows = [
            SessionSummary(session_id=sid, turns=len(s.turns), branches=len(s.tips), open_requests=len(s.inflight),
                           errors=[str(e) for e in s.errors]).model_dump()
            for sid, s in self.sessions.items()
        ]
        return JSONResponse(rows)

    def _trajectory_response(self, s: TitoSession, request: Request) -> Response:
        branch = request.query_params.get("branch")
        try:
            traj = s.trajectory(int(branch) if branch is not None else None)
        except (KeyError, ValueError) as exc:
            raise BadRequestError(f"no branch {branch!r} in this session ({type(exc).__name__}: {exc})") from exc
        return Response(traj.model_dump_json(), media_type="application/json")

    async def _trajectory_admin(self, request: Request) -> Response:
        self._check_admin(request)
        return self._trajectory_response(self.session(request.path_params["sid"]), request)

    async def _trajectory_own(self, request: Request) -> Response:
        return self._trajectory_response(self._session_at(request), request)

    async def _close(self, request: Request) -> Response:
        self._check_admin(request)
        sid = request.path_params["sid"]
        self.session(sid)  # 404 when there is none
        traj = self.close_session(sid)
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

    async def _chat_default(self, request: Request) -> Response:
        self._check_admin(request)
        return await self._chat(request, self.open_session("default"))

    async def _chat_session(self, request: Request) -> Response:
        return await self._chat(request, self._session_at(request))

    async def _chat(self, request: Request, session: TitoSession) -> Response:
        if self._stopping:
            raise EngineRequestInterruptedError("the gateway is stopping")
        try:
            await self.prepare()
            assert self.engine is not None and self.parser is not None
            req = ChatCompletionRequest.parse(await request.body())
            try:
                plan = session.plan(req.messages, tools=req.tools, template_kwargs=req.chat_template_kwargs)
            except ChatTemplateError as exc:
                raise BadRequestError(str(exc)) from exc
            except (TypeError, ValueError, AttributeError, KeyError) as exc:  # shapes only the client's messages hold
                raise BadRequestError(f"the messages could not be read: {type(exc).__name__}: {exc}") from exc
            body = self._engine_body(req, plan)
            if req.stream:
                return await self._chat_stream(request, req, session, plan, body)
            task = asyncio.ensure_future(self.engine.complete(body))
            result = await self._engine_answer(request, session, task, self._track(session, task), task)
            self.liveness.answered()
            return JSONResponse(self._chat_response(req, session, plan, result))
        except (ClientGone, ClientDisconnect):
            return Response(status_code=499)  # nobody reads it; uvicorn drops it
        except EngineRequestInterruptedError:
            raise  # the session already knows (request_abandoned)
        except BadRequestError:
            raise  # the client's own mistake; not the trial's engine record
        except GatewayError as exc:
            session.record_error(exc)
            raise
        except Exception as exc:
            log.error("gateway: a chat completion failed: %s: %s", type(exc).__name__, exc)
            log.debug("gateway: a chat completion failed", exc_info=True)
            err = GatewayInternalError(
                f"the gateway failed on this request ({type(exc).__name__}: {exc}); this is a bug in tackroom's gateway"
            )
            session.record_error(err)
            raise err from exc

    def _interrupted(self, session: TitoSession, entry: OpenRequest) -> EngineRequestInterruptedError:
        reason = entry.cancel_reason or "the engine request was cancelled"
        session.request_abandoned(entry, reason)
        return EngineRequestInterruptedError(f"the engine request was cut off: {reason}")

    async def _engine_answer(
        self, request: Request, session: TitoSession, work: asyncio.Future[Any], entry: OpenRequest,
        answer: asyncio.Future[Any],
    ) -> Any:
        """``answer``'s result, unless the client goes away first: then ``work`` (the engine call) is
        cancelled, the session notes that its request was abandoned, and ``ClientGone`` is raised."""
        gone = asyncio.ensure_future(client_gone(request))
        try:
            await asyncio.wait({answer, gone}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            if not work.done():
                work.cancel()
                entry.turn_ended = False
                session.request_abandoned(entry, "the gateway stopped")
            answer.cancel()
            raise
        finally:
            gone.cancel()
        if answer.done():
            if answer.cancelled():
                raise self._interrupted(session, entry)
            return answer.result()
        answer.cancel()
        if not work.done():
            work.cancel()
            session.request_abandoned(entry, "the client closed its connection")
        raise ClientGone

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
            "logprobs": chat_logprobs(result.tokens or [], result.logprobs or [], result.top_logprobs or [])
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
        self, request: Request, req: ChatCompletionRequest, session: TitoSession, plan: PromptPlan, body: dict[str, Any]
    ) -> Response:
        assert self.engine is not None and self.parser is not None
        queue: asyncio.Queue[Any] = asyncio.Queue()
        pump = asyncio.ensure_future(pump_stream(self.engine.stream(body), queue))
        entry = self._track(session, pump)
        # Wait for the engine's first chunk so that failures before any output are plain HTTP errors.
        first = await self._engine_answer(request, session, pump, entry, asyncio.ensure_future(queue.get()))
        if first is CANCELLED:
            raise self._interrupted(session, entry)
        if isinstance(first, BaseException):
            raise first
        return StreamingResponse(
            self._sse_events(req, session, plan, queue, pump, entry, first),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def _sse_events(
        self,
        req: ChatCompletionRequest,
        session: TitoSession,
        plan: PromptPlan,
        queue: asyncio.Queue[Any],
        pump: asyncio.Future[None],
        entry: OpenRequest,
        first: Any,
    ) -> AsyncIterator[bytes]:
        assert self.parser is not None
        stream_id = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        model = self.model_name

        def chunk(delta: dict[str, Any], finish: str | None = None, logprobs: dict | None = None) -> bytes:
            return sse(
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
        try:
            yield chunk({"role": "assistant", "content": ""})
            piece = first
            while piece is not END:
                if piece is CANCELLED:
                    raise self._interrupted(session, entry)
                if isinstance(piece, BaseException):
                    raise piece
                self.liveness.answered()
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
                lp = chat_logprobs(piece.tokens, piece.logprobs, piece.top_logprobs) if req.logprobs else None
                if out or lp:
                    yield chunk(out, logprobs=lp)
                piece = await queue.get()
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
                yield sse(
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
        except GatewayError as exc:
            # Output may have reached the client already: the error is an SSE event, then the stream ends.
            if not isinstance(exc, EngineRequestInterruptedError):
                session.record_error(exc)
            yield sse(exc.openai())
            yield b"data: [DONE]\n\n"
        except Exception as exc:
            log.error("gateway: a streamed chat completion failed: %s: %s", type(exc).__name__, exc)
            log.debug("gateway: a streamed chat completion failed", exc_info=True)
            err = GatewayInternalError(f"the gateway failed mid-stream ({type(exc).__name__}: {exc})")
            session.record_error(err)
            yield sse(err.openai())
            yield b"data: [DONE]\n\n"
        except BaseException:
            # Cancelled (the client went away: Starlette cancels the stream) or closed: the engine
            # request, if still running, is abandoned.
            if not pump.done():
                pump.cancel()
                session.request_abandoned(entry, "the client closed its connection mid-stream")
            raise
        finally:
            if not pump.done():
                pump.cancel()


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

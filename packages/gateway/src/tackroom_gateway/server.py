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
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tackroom_gateway.asgi_server import InLoopServer
from tackroom_gateway.auth import check_admin, session_at
from tackroom_gateway.chat import ChatRoutes
from tackroom_gateway.chat_template import ChatTemplate
from tackroom_gateway.engine_client import EngineClient, EngineSettings
from tackroom_gateway.errors import EngineRequestInterruptedError, GatewayError, GatewayInternalError
from tackroom_gateway.liveness import EngineLiveness
from tackroom_gateway.sessions import SessionRoutes
from tackroom_gateway.streaming import error_response
from tackroom_gateway.tito import OpenRequest, TitoSession
from tackroom_gateway.tool_parsers import ToolParser, get_tool_parser

log = logging.getLogger("tackroom_gateway")


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


class PolicyGateway(SessionRoutes, ChatRoutes):
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

    This class holds the gateway's state, its lifecycle, the engine liveness watch, access checks and the
    route table; the sessions (:class:`~tackroom_gateway.sessions.SessionRoutes`) and the chat completions
    (:class:`~tackroom_gateway.chat.ChatRoutes`) live beside it.
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
        """Ask the engine for its model, then load the tokenizer/template; idempotent.

        The engine first: an engine that is not there fails in a second, before the tokenizer's load (transformers,
        and torch where it is installed: ~20 s of CPU on the project's 2-core machine).
        """
        if self.engine is None:
            self.engine = EngineClient(self.settings.engine)
        if self.engine.info is None:
            await self.engine.fetch_info()
        if self.template is None:
            self.template = await asyncio.to_thread(ChatTemplate.from_path, self.settings.tokenizer)
        if self.parser is None:
            name = self.settings.tool_parser
            if name == "auto":
                name = "qwen3" if self.template.think_tokens else "hermes"
            self.parser = get_tool_parser(name)

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

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
* admin: ``GET /weights``, ``POST /weights/pause`` (``{"mode": "finish" | "continue"}``), ``POST /weights/resume``
  (``{"policy_version": N}``): the weight-update control (:mod:`tackroom_gateway.weight_updates`)
* ``GET /health``

Every failure is answered as an OpenAI error, ``{"error": {"message", "type", "param", "code"}}``.
:class:`PolicyGateway` is the programmatic handle the trial runtime uses. It is put together from parts,
each given what it uses: an :class:`~tackroom_gateway.backend.EngineBackend` (engine client, chat template, tool
parser, liveness), a :class:`~tackroom_gateway.sessions.SessionStore` over it, a
:class:`~tackroom_gateway.chat.ChatHandler` over both, and the :class:`~tackroom_gateway.routes.GatewayRoutes`
table that serves them over HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException

from tackroom import Policy, TackroomError, Trajectory
from tackroom_gateway.asgi_server import InLoopServer
from tackroom_gateway.backend import EngineBackend, GatewaySettings
from tackroom_gateway.chat import ChatHandler
from tackroom_gateway.chat_template import ChatTemplate
from tackroom_gateway.engine_client import EngineClient
from tackroom_gateway.errors import GatewayError
from tackroom_gateway.liveness import EngineLiveness
from tackroom_gateway.routes import GatewayRoutes
from tackroom_gateway.sessions import SessionStore
from tackroom_gateway.tito import TitoSession
from tackroom_gateway.tool_parsers import ToolParser
from tackroom_gateway.trial_sessions import GatewaySessions
from tackroom_gateway.weight_updates import WeightUpdateState


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
        self.backend = EngineBackend(settings, template)
        self.store = SessionStore(self.backend)
        self.chat = ChatHandler(self.backend, self.store)
        self.routes = GatewayRoutes(self.backend, self.store, self.chat, admin_token or secrets.token_urlsafe(32))
        self.app = Starlette(routes=self.routes.table(), exception_handlers={HTTPException: self.routes.http_error},
                             lifespan=self._lifespan)
        self._server: InLoopServer | None = None
        self.port: int | None = None

    # -- the parts' state, by the names callers read ----------------------------------------------
    @property
    def settings(self) -> GatewaySettings:
        return self.backend.settings

    @property
    def admin_token(self) -> str:
        return self.routes.admin_token

    @property
    def engine(self) -> EngineClient | None:
        return self.backend.engine

    @property
    def template(self) -> ChatTemplate | None:
        return self.backend.template

    @property
    def parser(self) -> ToolParser | None:
        return self.backend.parser

    @property
    def liveness(self) -> EngineLiveness:
        return self.backend.liveness

    @property
    def sessions(self) -> dict[str, TitoSession]:
        return self.store.sessions

    # -- lifecycle ---------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        await self.prepare()
        try:
            yield
        finally:
            await self.store.stop_watch()
            await self.backend.aclose()

    async def prepare(self) -> None:
        """Ask the engine for its model, then load the tokenizer/template; idempotent."""
        await self.backend.prepare()

    async def start(self) -> PolicyGateway:
        """Serve in this event loop; returns once the socket is bound (the port is then in ``self.port``)."""
        await self.prepare()
        self.store.stopping = False
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
        await self.store.shut("the gateway stopped")
        if self._server is not None:
            await self._server.stop()
            self._server = None
        await self.backend.aclose()

    async def __aenter__(self) -> PolicyGateway:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- programmatic API ----------------------------------------------------------
    @property
    def base_url(self) -> str:
        return self.settings.public_url(self.port)

    @property
    def model_name(self) -> str:
        return self.backend.model_name

    def open_session(self, session_id: str | None = None) -> TitoSession:
        """The session with this id, created (with a fresh token) if there is none; a random id when None."""
        return self.store.open(session_id)

    def session_base_url(self, session_id: str) -> str:
        """The OpenAI base URL (``.../sessions/{id}/{token}/v1``) a harness uses; opens the session if needed."""
        base = self.base_url
        s = self.store.open(session_id)
        return f"{base}/sessions/{s.session_id}/{s.token}/v1"

    def policy(self, session_id: str, **overrides: Any) -> Policy:
        """A :class:`tackroom.Policy` pointing at this session (opened if needed)."""
        return Policy(
            base_url=self.session_base_url(session_id),
            model=self.model_name,
            tokenizer=self.template.name_or_path if self.template else self.settings.tokenizer,
            **overrides,
        )

    def trial_sessions(self, *, sampling: dict[str, Any] | None = None, label: str | None = None) -> GatewaySessions:
        """``TrialPlugins.policy_for``: a fresh session of this gateway per trial attempt (what
        ``tackroom_policy_gateway`` promises)."""
        return GatewaySessions(self, sampling=sampling, label=label)

    def session(self, session_id: str) -> TitoSession:
        return self.store.get(session_id)

    def trajectory(self, session_id: str, branch: int | None = None) -> Trajectory:
        """The session's turns and the flattened tokens of ``branch`` (default: the newest turn's branch)."""
        return self.store.trajectory(session_id, branch)

    def session_error(self, session_id: str) -> TackroomError | None:
        """The classified error that should decide the trial (:meth:`SessionStore.error`), or None."""
        return self.store.error(session_id)

    async def settle_session(self, session_id: str) -> None:
        """One last liveness probe when the session's turn ended on an engine request nothing has judged yet
        (:meth:`SessionStore.settle`); before :meth:`session_error` at the end of a turn."""
        await self.store.settle(session_id)

    @property
    def policy_version(self) -> int | None:
        """The version the last :meth:`resume` named (tokens sampled now are tagged with it), or None."""
        return self.backend.weights.policy_version

    async def pause(self, mode: str = "finish") -> WeightUpdateState:
        """Before a weight update: hold every model call not yet on the engine; those on it complete on the old
        weights (``finish``; returns once they have) or are cut, to be continued from what they sampled on the
        new weights (``continue``). See :mod:`tackroom_gateway.weight_updates`."""
        return await self.backend.weights.pause(mode)

    def resume(self, policy_version: int | None = None) -> WeightUpdateState:
        """After a weight update: the held model calls go on; tokens sampled from now on are tagged with
        ``policy_version`` (None: the version stays)."""
        return self.backend.weights.resume(policy_version)

    def close_session(self, session_id: str) -> Trajectory | None:
        """Forget a session (its URL stops working, its open engine requests are cut off); returns its
        trajectory (None if it never finished a turn)."""
        return self.store.close(session_id)


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
    return PolicyGateway(GatewaySettings.for_engine(engine_url, tokenizer=tokenizer, model=model,
                                                    tool_parser=tool_parser, host=host, port=port, **engine_options))


__all__ = ["GatewaySettings", "PolicyGateway", "build_gateway"]

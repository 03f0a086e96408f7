"""The gateway's route table: which HTTP route does what, who may call it, and how every failure is answered.

``{sid}/{token}`` is a session's id and its unguessable token; *admin* routes need the gateway's admin token.
Each handler checks access (:mod:`tackroom_gateway.auth`) and hands the work to the session store or the chat
handler; :meth:`GatewayRoutes.guarded` turns whatever escapes into an OpenAI-shaped error, so nothing reaches
uvicorn's log."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tackroom_gateway.auth import check_admin, session_at
from tackroom_gateway.backend import EngineBackend
from tackroom_gateway.chat import ChatHandler
from tackroom_gateway.dialects import CHAT, DIALECTS, Dialect
from tackroom_gateway.errors import BadRequestError, EngineRequestInterruptedError, GatewayError, GatewayInternalError
from tackroom_gateway.sessions import SessionStore
from tackroom_gateway.tito import TitoSession
from tackroom_gateway.weight_updates import weight_update_mode

log = logging.getLogger("tackroom_gateway")

Handler = Callable[[Request], Awaitable[Response]]


class GatewayRoutes:
    """The HTTP face of a gateway over its ``backend``, ``store`` and ``chat`` handler; :meth:`table` lists the
    routes, ``admin_token`` guards the admin ones."""

    def __init__(self, backend: EngineBackend, store: SessionStore, chat: ChatHandler, admin_token: str) -> None:
        self.backend = backend
        self.store = store
        self.chat = chat
        self.admin_token = admin_token

    def table(self) -> list[Route]:
        g = self.guarded
        return [
            Route("/health", g(self.health), methods=["GET"]),
            Route("/v1/models", g(self.models), methods=["GET"]),
            Route("/sessions", g(self.list_sessions), methods=["GET"]),
            Route("/sessions", g(self.create_session), methods=["POST"]),
            Route("/sessions/{sid}/trajectory", g(self.trajectory_admin), methods=["GET"]),
            Route("/sessions/{sid}", g(self.close_session), methods=["DELETE"]),
            Route("/sessions/{sid}/{token}/v1/models", g(self.session_models), methods=["GET"]),
            Route("/sessions/{sid}/{token}/trajectory", g(self.trajectory_own), methods=["GET"]),
            Route("/weights", g(self.weights), methods=["GET"]),
            Route("/weights/pause", g(self.pause), methods=["POST"]),
            Route("/weights/resume", g(self.resume), methods=["POST"]),
            *self.dialect_routes(),
        ]

    def dialect_routes(self) -> list[Route]:
        """Each dialect's paths, in a session (``/sessions/{sid}/{token}/...``) and in the admin's default session."""
        routes = []
        for dialect in DIALECTS:
            for path in dialect.paths:
                routes.append(Route(f"/sessions/{{sid}}/{{token}}{path}", self.guarded(self._serve_session(dialect), dialect),
                                    methods=["POST"]))
                routes.append(Route(path, self.guarded(self._serve_default(dialect), dialect), methods=["POST"]))
        return routes

    def _serve_session(self, dialect: Dialect) -> Handler:
        async def serve(request: Request) -> Response:
            return await self.chat.serve(request, self.session_at(request), dialect)

        serve.__name__ = f"{dialect.name} (session)"
        return serve

    def _serve_default(self, dialect: Dialect) -> Handler:
        async def serve(request: Request) -> Response:
            self.check_admin(request)
            return await self.chat.serve(request, self.store.open("default"), dialect)

        serve.__name__ = f"{dialect.name} (default session)"
        return serve

    # -- failures ------------------------------------------------------------------------
    def guarded(self, handler: Handler, dialect: Dialect = CHAT) -> Handler:
        """Every failure of ``handler`` becomes an error answer shaped as ``dialect``'s clients expect (OpenAI's
        by default); nothing escapes to uvicorn's log."""
        error_response = dialect.error_response

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

    @staticmethod
    async def http_error(request: Request, exc: Exception) -> Response:
        """Starlette's own 404/405 (no such route, wrong method) as OpenAI errors."""
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

    # -- access ------------------------------------------------------------------------
    def check_admin(self, request: Request) -> None:
        check_admin(request, self.admin_token)

    def session_at(self, request: Request) -> TitoSession:
        """The session a ``/sessions/{sid}/{token}/...`` URL names, if the token is its own."""
        return session_at(request, self.store.sessions)

    # -- the gateway and its model --------------------------------------------------------
    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "stopping" if self.store.stopping else "ok", "model": self.backend.model_name})

    async def models(self, request: Request) -> Response:
        info = self.backend.engine.info if self.backend.engine else None
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.backend.model_name,
                        "object": "model",
                        "created": 0,
                        "owned_by": "tackroom",
                        "max_model_len": info.max_model_len if info else None,
                    }
                ],
            }
        )

    async def session_models(self, request: Request) -> Response:
        self.session_at(request)
        return await self.models(request)

    # -- sessions ------------------------------------------------------------------------
    @staticmethod
    async def _object(request: Request, example: str) -> dict[str, Any]:
        """An admin body: empty (``{}``) or a JSON object; anything else a 400 showing ``example``."""
        raw = await request.body()
        try:
            data = json.loads(raw) if raw.strip() else {}
        except ValueError as exc:
            raise BadRequestError(f"body must be empty or JSON like {example}: {exc}") from exc
        if not isinstance(data, dict):
            raise BadRequestError(f"body must be empty or a JSON object like {example}")
        return data

    @staticmethod
    def _session_urls(request: Request, s: TitoSession) -> dict[str, str]:
        base = f"{str(request.base_url).rstrip('/')}/sessions/{s.session_id}/{s.token}"
        return {"session_id": s.session_id, "base_url": f"{base}/v1", "trajectory_url": f"{base}/trajectory"}

    async def create_session(self, request: Request) -> Response:
        self.check_admin(request)
        example = '{"session_id": "..."}'
        data = await self._object(request, example)
        if not isinstance(data.get("session_id", ""), str):
            raise BadRequestError(f"body must be empty or a JSON object like {example}")
        sid = data.get("session_id") or None
        existed = sid in self.store.sessions
        s = self.store.open(sid)
        return JSONResponse(self._session_urls(request, s), status_code=200 if existed else 201)

    async def list_sessions(self, request: Request) -> Response:
        self.check_admin(request)
        return JSONResponse([row.model_dump() for row in self.store.summaries()])

    @staticmethod
    def _trajectory_response(s: TitoSession, request: Request) -> Response:
        branch = request.query_params.get("branch")
        try:
            traj = s.trajectory(int(branch) if branch is not None else None)
        except (KeyError, ValueError) as exc:
            raise BadRequestError(f"no branch {branch!r} in this session ({type(exc).__name__}: {exc})") from exc
        return Response(traj.model_dump_json(), media_type="application/json")

    async def trajectory_admin(self, request: Request) -> Response:
        self.check_admin(request)
        return self._trajectory_response(self.store.get(request.path_params["sid"]), request)

    async def trajectory_own(self, request: Request) -> Response:
        return self._trajectory_response(self.session_at(request), request)

    async def close_session(self, request: Request) -> Response:
        self.check_admin(request)
        sid = request.path_params["sid"]
        self.store.get(sid)  # 404 when there is none
        traj = self.store.close(sid)
        return Response(traj.model_dump_json() if traj else "null", media_type="application/json")

    # -- weight updates ------------------------------------------------------------------------
    async def weights(self, request: Request) -> Response:
        self.check_admin(request)
        return JSONResponse(self.backend.weights.state().model_dump())

    async def pause(self, request: Request) -> Response:
        """Hold model calls for a weight update; answers once none is on the engine."""
        self.check_admin(request)
        data = await self._object(request, '{"mode": "continue"}')
        mode = weight_update_mode(str(data.get("mode", "finish")))
        return JSONResponse((await self.backend.weights.pause(mode)).model_dump())

    async def resume(self, request: Request) -> Response:
        self.check_admin(request)
        data = await self._object(request, '{"policy_version": 2}')
        version = data.get("policy_version")
        if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
            raise BadRequestError(f"policy_version must be an integer or null, not {version!r}")
        return JSONResponse(self.backend.weights.resume(version).model_dump())

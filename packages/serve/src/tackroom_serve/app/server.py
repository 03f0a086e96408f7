"""The service put together: the database, the dispatcher, the route table served by Starlette, and its life
(a start resumes what the last process left running; a stop cancels what runs, to be resumed at the next start)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Literal

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tackroom import ConfigError, TaskError
from tackroom_app import PluginConflictError, PluginManager
from tackroom_serve.app.auth import Tokens
from tackroom_serve.app.http import ApiError, parse_json, query_of, read_body, validated
from tackroom_serve.app.openapi import openapi_document
from tackroom_serve.app.routes import Call, Operation, Parts, ServeRoutes
from tackroom_serve.db.readonly import SqlRefused, readonly_engine
from tackroom_serve.db.reads import Reader
from tackroom_serve.db.schema import create_tables, database_url, make_engine
from tackroom_serve.db.store import Conflict, Store
from tackroom_serve.queue.runner import Runners
from tackroom_serve.queue.worker import Dispatcher

log = logging.getLogger("tackroom.serve")


def package_version() -> str:
    try:
        return version("tackroom-serve")
    except PackageNotFoundError:
        return "0"


@dataclass
class ServeSettings:
    """``tackroom serve``'s options."""

    folder: Path = Path("serve")
    """Where the SQLite database (by default) and each batch's trial folders go."""
    db: str | None = None
    """A database URL (``postgresql://user@host/db``); default: ``<folder>/serve.db``."""
    concurrency: int = 16
    """Trials running at once over every batch (each batch also keeps to its own ``runtime.concurrency``)."""
    on_restart: Literal["requeue", "interrupt"] = "requeue"
    """What becomes of rollouts the last process left running: queued again as a new attempt, or ``interrupted``."""
    max_body_bytes: int = 1 << 20
    tasks_root: Path = Path(".")
    """Relative task paths in a batch's config resolve against it."""
    cancel_wait_sec: float = 10.0
    """How long a cancel waits for running trials to tear down before it answers."""


class Service:
    """``service.app`` is the ASGI app (its lifespan starts and stops the dispatcher)."""

    def __init__(self, settings: ServeSettings, tokens: Tokens, *, manager: PluginManager | None = None) -> None:
        self.settings = settings
        self.tokens = tokens
        self.url = database_url(settings.db, settings.folder)
        settings.folder.mkdir(parents=True, exist_ok=True)
        self.engine = make_engine(self.url)
        create_tables(self.engine)
        self.readonly = readonly_engine(self.url)
        self.store, self.reader = Store(self.engine), Reader(self.engine)
        self.dispatcher = Dispatcher(self.store, self.reader, Runners(settings.folder, manager),
                                     concurrency=settings.concurrency)
        self.version = package_version()
        routes = ServeRoutes(Parts(reader=self.reader, dispatcher=self.dispatcher, readonly=self.readonly,
                                   tasks_root=settings.tasks_root.resolve(), cancel_wait_sec=settings.cancel_wait_sec,
                                   manager=manager, version=self.version))
        self.operations = routes.operations()
        self.recovered: list[str] = []
        handlers = {404: _http_error, 405: _http_error}
        self.app = Starlette(routes=[*(self.route(op) for op in self.operations),
                                     Route("/openapi.json", self.openapi, methods=["GET"])],
                             lifespan=self.lifespan, exception_handlers=handlers)  # type: ignore[arg-type]

    # -- life ---------------------------------------------------------------------------------------
    async def start(self) -> None:
        self.recovered = await asyncio.to_thread(self.store.recover, self.settings.on_restart == "requeue")
        if self.recovered:
            log.warning("%d rollouts were running when the service last stopped: %s", len(self.recovered),
                        "queued again as new attempts" if self.settings.on_restart == "requeue" else "interrupted")
        self.dispatcher.start()

    async def stop(self) -> None:
        await self.dispatcher.stop()
        self.engine.dispose()
        self.readonly.dispose()

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Any) -> AsyncIterator[None]:
        await self.start()
        try:
            yield
        finally:
            await self.stop()

    # -- requests -----------------------------------------------------------------------------------
    def route(self, op: Operation) -> Route:
        async def handle(request: Request) -> Response:
            try:
                return await op.handler(await self.checked(op, request))
            except ApiError as exc:
                return exc.response()
            except Conflict as exc:
                return ApiError(409, "conflict", str(exc)).response()
            except SqlRefused as exc:
                return ApiError(400, exc.code, str(exc)).response()
            except (ConfigError, TaskError, PluginConflictError) as exc:
                return ApiError(422, "invalid_config", str(exc)).response()

        return Route(op.path, handle, methods=[op.method], name=op.handler.__name__)

    async def checked(self, op: Operation, request: Request) -> Call:
        """The token first (401 before the body is read), then the body within its limit, then the models."""
        client = ""
        if op.auth:
            found = self.tokens.client(request.headers.get("authorization"))
            if found is None:
                raise ApiError(401, "unauthorized", "send `Authorization: Bearer <token>` with a token the service "
                               "was given (--tokens) or printed at start")
            client = found
        call = Call(request, client)
        if op.body is not None:
            call.raw = parse_json(await read_body(request, self.settings.max_body_bytes))
            call.body = validated(op.body, call.raw)
        if op.query is not None:
            call.query = query_of(op.query, request)
        return call

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(openapi_document(self.operations, self.version))


async def _http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    code = {404: "not_found", 405: "method_not_allowed"}.get(status, "error")
    return ApiError(status, code, f"{request.method} {request.url.path}: {code.replace('_', ' ')} "
                    "(GET /openapi.json lists the routes)").response()

"""What the test servers of ``tackroom.testing`` share: JSON routes served in this event loop as an OpenAI base URL.

Core has no web framework (starlette and uvicorn belong to tackroom-gateway), so this is a
small HTTP/1.1 server on ``asyncio.start_server``: enough for a test double that answers
JSON (request bodies by ``Content-Length`` or chunked, keep-alive, ``Expect: 100-continue``),
and nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Self

from tackroom._policy import Policy

MAX_LINE = 64 * 1024
MAX_BODY = 64 * 1024 * 1024


@dataclass
class RequestForTests:
    """One request: method, path (without the query), lower-case header names, raw body."""


    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The body as JSON (``ValueError`` when it is not)."""
        return json.loads(self.body)


@dataclass
class ResponseForTests:
    """What a route answers."""


    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, obj: Any, status: int = 200) -> ResponseForTests:
        return cls(status=status, body=json.dumps(obj).encode())


Route = Callable[[RequestForTests], Awaitable[ResponseForTests]]


class _BadRequest(Exception):
    pass


async def _read_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> tuple[RequestForTests, bool] | None:
    """The next request on the connection and whether to keep it open; None when the client closed it."""
    line = await reader.readline()
    if not line:
        return None
    parts = line.decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _BadRequest(f"bad request line {line[:100]!r}")
    method, target, version = parts
    headers: dict[str, str] = {}
    while True:
        raw = await reader.readline()
        if raw in (b"\r\n", b"\n", b""):
            break
        name, sep, value = raw.decode("latin-1").partition(":")
        if not sep:
            raise _BadRequest(f"bad header line {raw[:100]!r}")
        headers[name.strip().lower()] = value.strip()
    if headers.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    if "chunked" in headers.get("transfer-encoding", "").lower():
        chunks = []
        while True:
            size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                break
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)
        body = b"".join(chunks)
    else:
        length = int(headers.get("content-length") or 0)
        if not 0 <= length <= MAX_BODY:
            raise _BadRequest(f"bad Content-Length {length}")
        body = await reader.readexactly(length) if length else b""
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    return RequestForTests(method=method.upper(), path=target.split("?", 1)[0], headers=headers, body=body), keep_alive


def _encode(response: ResponseForTests, keep_alive: bool) -> bytes:
    try:
        reason = http.HTTPStatus(response.status).phrase
    except ValueError:
        reason = "Status"
    head = [f"HTTP/1.1 {response.status} {reason}", f"Content-Type: {response.content_type}",
            f"Content-Length: {len(response.body)}", f"Connection: {'keep-alive' if keep_alive else 'close'}"]
    head += [f"{k}: {v}" for k, v in response.headers.items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + response.body


class ServedForTests:
    """A test server in this event loop (``async with`` or ``await start()``); ``base_url`` ends in ``/v1``.

    The base of every test double that stands in for an OpenAI endpoint: core's own
    (:class:`RoutesServedForTests`, JSON routes on ``asyncio.start_server``) and the ASGI ones of
    ``tackroom_gateway.testing``. A subclass calls :meth:`_setup` and serves in :meth:`_listen` /
    :meth:`_shutdown`. ``_closing`` is set when the server stops, so replies a test holds open end
    instead of holding the shutdown.
    """

    def _setup(self, *, model: str, what: str, graceful_timeout_s: float) -> None:
        self.model = model
        self.what = what
        self.graceful_timeout_s = graceful_timeout_s
        self.port: int | None = None
        self._closing = asyncio.Event()

    async def _listen(self) -> int:
        """Start serving on 127.0.0.1; the port."""
        raise NotImplementedError

    async def _shutdown(self) -> None:
        """Stop serving: answers in progress get ``graceful_timeout_s``, then every connection closes."""
        raise NotImplementedError

    async def start(self) -> Self:
        self._closing = asyncio.Event()
        self.port = await self._listen()
        return self

    async def stop(self) -> None:
        self._closing.set()
        await self._shutdown()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        """The server's OpenAI base URL, ending in ``/v1``."""
        if self.port is None:
            raise RuntimeError(f"{self.what} not started: use `async with` or await start()")
        return f"http://127.0.0.1:{self.port}/v1"

    def policy(self, **overrides: Any) -> Policy:
        """A :class:`~tackroom.Policy` pointing straight at this server."""
        return Policy(base_url=self.base_url, model=self.model, **overrides)


class RoutesServedForTests(ServedForTests):
    """Serves ``routes`` (``{(method, path): route}``) with core's small HTTP/1.1 server."""

    def _serve(self, routes: dict[tuple[str, str], Route], *, model: str, what: str,
               graceful_timeout_s: float) -> None:
        self.routes = routes
        self._setup(model=model, what=what, graceful_timeout_s=graceful_timeout_s)
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[Any]] = set()
        self._busy = 0

    async def _listen(self) -> int:
        try:
            self._server = await asyncio.start_server(self._connection, "127.0.0.1", 0, limit=MAX_LINE)
        except OSError as exc:
            raise RuntimeError(f"{self.what} failed to start on 127.0.0.1: {exc}") from exc
        return self._server.sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.graceful_timeout_s
        while self._busy and loop.time() < deadline:
            await asyncio.sleep(0.01)
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(server.wait_closed(), 5)

    async def _dispatch(self, request: RequestForTests) -> ResponseForTests:
        route = self.routes.get((request.method, request.path))
        if route is None:
            allowed = any(path == request.path for _, path in self.routes)
            status = 405 if allowed else 404
            return ResponseForTests.json({"error": {"message": f"{request.method} {request.path}: "
                                                f"{http.HTTPStatus(status).phrase}"}}, status)
        try:
            return await route(request)
        except Exception as exc:
            return ResponseForTests.json({"error": {"message": f"{type(exc).__name__}: {exc}"}}, 500)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        try:
            while not self._closing.is_set():
                try:
                    got = await _read_request(reader, writer)
                except (_BadRequest, ValueError, asyncio.LimitOverrunError) as exc:
                    writer.write(_encode(ResponseForTests.json({"error": {"message": str(exc)}}, 400), False))
                    await writer.drain()
                    return
                if got is None:
                    return
                request, keep_alive = got
                self._busy += 1
                try:
                    response = await self._dispatch(request)
                finally:
                    self._busy -= 1
                keep_alive = keep_alive and not self._closing.is_set()
                writer.write(_encode(response, keep_alive))
                await writer.drain()
                if not keep_alive:
                    return
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            return
        finally:
            if task is not None:
                self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1)

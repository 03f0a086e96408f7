"""In a worker of a multi-worker gateway: serve a request here, pass it to the worker that holds its session, or
ask every worker.

The front hands a connection to the worker that owns the session of its first request
(:mod:`tackroom_gateway.pinning`), but a kept-alive connection carries later requests too, for any session. So
every request a worker gets from outside goes through :class:`WorkerRouter`:

* a session's request (``/sessions/{sid}/...``, and the admin's routes outside a session, which serve session
  ``default``) is served here when this worker owns the session, else forwarded to the owner's private loopback
  port, the answer streamed back as it comes (an SSE stream stays a stream). A client that goes away is let go
  upstream too, so the owner cuts its engine request as it would for a direct client;
* ``POST /sessions`` creates the session on its owner: an explicit ``session_id`` is forwarded there, and without
  one this worker draws ids until one is its own;
* ``GET /sessions``, ``GET /weights``, ``POST /weights/pause``, ``POST /weights/resume`` and ``GET /health`` ask
  every worker (this one too, on its private port) and answer for all: the sessions of every worker (each row
  with its ``worker``), the weight state summed over workers (``pause`` answers once every worker has paused),
  the health of each;
* the rest (``/v1/models``, unknown paths) is answered here.

Requests arriving on the private port come from a sibling that already chose this worker: they are served here,
as they are. The session whose owner has exited gets a 503 :class:`~tackroom_gateway.errors.WorkerLostError`
naming the worker, at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from tackroom_gateway.errors import GatewayError, WorkerLostError
from tackroom_gateway.pinning import owner, session_of

log = logging.getLogger("tackroom_gateway")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
                         "upgrade", "content-length"})
"""Request headers that describe one hop, not the request (aiohttp sets the body's length itself)."""
_ANSWER_HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"transfer-encoding", b"date", b"server"})
"""Answer headers the serving worker's uvicorn sets again for the client's hop."""
_FAN_OUT = {("GET", "/sessions"), ("GET", "/weights"), ("POST", "/weights/pause"), ("POST", "/weights/resume"),
            ("GET", "/health")}


class _ClientGone(Exception):
    """The client hung up before its request's body arrived."""


class Siblings:
    """The workers of one gateway as one of them sees them: its own index, each one's private port and pid (known
    once every worker is up), and those that exited, with why."""

    def __init__(self, index: int, count: int) -> None:
        self.index, self.count = index, count
        self.ports: list[int] = []
        self.pids: list[int] = []
        self.lost: dict[int, str] = {}

    def owner(self, session_id: str) -> int:
        return owner(session_id, self.count)

    def name(self, worker: int) -> str:
        pid = f" (pid {self.pids[worker]})" if worker < len(self.pids) else ""
        return f"gateway worker {worker}{pid}"

    def lost_error(self, worker: int, session_id: str | None, why: str) -> WorkerLostError:
        what = f"session {session_id!r} lived in" if session_id is not None else "this request needs"
        return WorkerLostError(f"{what} {self.name(worker)}, which {why}: the sessions it held are lost; "
                               "open a new session (POST /sessions) and retry the trial")


class WorkerRouter:
    """An ASGI app: the worker's gateway ``app`` behind the pinning rules (see the module docstring).
    ``private_port`` (set once the worker serves) is where its siblings reach it."""

    def __init__(self, app: ASGIApp, siblings: Siblings) -> None:
        self.app = app
        self.siblings = siblings
        self.private_port: int | None = None
        self._client: aiohttp.ClientSession | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._from_sibling(scope):
            return await self.app(scope, receive, send)
        try:
            await self._route(scope, receive, send)
        except _ClientGone:
            return
        except GatewayError as exc:
            await _answer(send, exc.status_code, exc.openai(), exc.headers())

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    def _from_sibling(self, scope: Scope) -> bool:
        server = scope.get("server")
        return server is not None and server[1] == self.private_port

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> None:
        method, path = scope["method"], scope["path"]
        if (method, path) in _FAN_OUT:
            return await self._fan_out(scope, await _body(receive), send)
        if (method, path) == ("POST", "/sessions"):
            return await self._create_session(scope, receive, send)
        sid = session_of(path)
        worker = self.siblings.owner(sid) if sid is not None else self.siblings.index
        if worker == self.siblings.index:
            return await self.app(scope, receive, send)
        await self._forward(worker, sid, scope, await _body(receive), receive, send)

    # -- one session's request, to its owner ------------------------------------------------------------------
    async def _create_session(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await _body(receive)
        try:
            data = json.loads(body) if body.strip() else {}
        except ValueError:
            data = None  # the gateway's own check answers it
        if isinstance(data, dict) and data.get("session_id") in (None, ""):
            data["session_id"] = self._draw_own_id()
            body = json.dumps(data).encode()
        sid = data.get("session_id") if isinstance(data, dict) else None
        worker = self.siblings.owner(sid) if isinstance(sid, str) else self.siblings.index
        if worker == self.siblings.index:
            return await self.app(scope, _replay(body, receive), send)
        await self._forward(worker, sid, scope, body, receive, send)

    def _draw_own_id(self) -> str:
        while True:  # 1 draw in `count` is ours: a few at most
            sid = uuid.uuid4().hex
            if self.siblings.owner(sid) == self.siblings.index:
                return sid

    async def _forward(self, worker: int, sid: str | None, scope: Scope, body: bytes, receive: Receive,
                       send: Send) -> None:
        if worker in self.siblings.lost:
            raise self.siblings.lost_error(worker, sid, self.siblings.lost[worker])
        relay = asyncio.ensure_future(self._relay(worker, sid, scope, body, send))
        gone = asyncio.ensure_future(_disconnected(receive))
        try:
            await asyncio.wait({relay, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not relay.done():  # the client went away: so does the request to the owner, which lets go of its engine
                relay.cancel()
                await asyncio.wait({relay})
        if not relay.cancelled():
            relay.result()

    async def _relay(self, worker: int, sid: str | None, scope: Scope, body: bytes, send: Send) -> None:
        try:
            answer = await self._request(worker, scope, body)
        except (aiohttp.ClientError, OSError) as exc:
            raise self.siblings.lost_error(
                worker, sid, f"does not answer ({type(exc).__name__}: {exc}; it may have exited)") from None
        async with answer:
            headers = [(k, v) for k, v in answer.raw_headers if k.lower() not in _ANSWER_HOP_BY_HOP]
            await send({"type": "http.response.start", "status": answer.status, "headers": headers})
            try:
                async for chunk in answer.content.iter_any():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            except (aiohttp.ClientError, OSError) as exc:
                # the answer has begun: all that is left is to close the client's connection (uvicorn does, as the
                # response is incomplete), which the client sees as the engine dying mid-answer would look
                log.warning("gateway: %s stopped answering mid-response: %s: %s", self.siblings.name(worker),
                            type(exc).__name__, exc)
                return
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _request(self, worker: int, scope: Scope, body: bytes) -> aiohttp.ClientResponse:
        """The same request (method, path, query, headers: ``Host`` too, so URLs in the answer name the public
        address; body) to ``worker``'s private port."""
        if self._client is None:
            # keep-alive shorter than uvicorn's (5 s), so a kept connection is never reused as the server closes it
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=2.0)
            self._client = aiohttp.ClientSession(connector=connector, auto_decompress=False,
                                                 timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
        raw_path = scope.get("raw_path") or scope["path"].encode()
        query = scope.get("query_string") or b""
        target = raw_path + (b"?" + query if query else b"")
        url = f"http://127.0.0.1:{self.siblings.ports[worker]}{target.decode('latin-1')}"
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]
                   if k.decode("latin-1").lower() not in _HOP_BY_HOP]
        return await self._client.request(scope["method"], url, data=body or None, headers=headers,
                                          allow_redirects=False,
                                          skip_auto_headers=("Accept", "Accept-Encoding", "User-Agent", "Content-Type"))

    # -- every worker ---------------------------------------------------------------------------------------
    async def _fan_out(self, scope: Scope, body: bytes, send: Send) -> None:
        async def ask(worker: int) -> tuple[int, int | None, list[tuple[bytes, bytes]], bytes]:
            if worker in self.siblings.lost:
                return worker, None, [], b""
            try:
                async with await self._request(worker, scope, body) as answer:
                    return worker, answer.status, list(answer.raw_headers), await answer.read()
            except (aiohttp.ClientError, OSError):
                return worker, None, [], b""

        answers = await asyncio.gather(*(ask(w) for w in range(self.siblings.count)))
        if scope["path"] == "/health":
            return await self._health(answers, send)
        refused = next((a for a in answers if a[1] is not None and a[1] != 200), None)
        if refused is not None:  # 401 without the admin token, 400 for a bad body: every worker says the same
            _, status, headers, content = refused
            kept = [(k, v) for k, v in headers if k.lower() not in (*_ANSWER_HOP_BY_HOP, b"content-length")]
            return await _answer_raw(send, status, kept, content)
        answered = [(w, json.loads(content)) for w, status, _, content in answers if status == 200]
        if scope["path"] == "/sessions":
            rows = [{**row, "worker": w} for w, listed in answered for row in listed]
            return await _answer(send, 200, rows)
        await _answer(send, 200, self._weights(answered))

    def _weights(self, answered: list[tuple[int, dict[str, Any]]]) -> dict[str, Any]:
        """Every worker's weight-update state as one: paused when any is, calls on the engine and waiting summed,
        the version and mode as the workers name them; ``workers`` has each one's own (a lost one as ``lost``)."""
        states = [state for _, state in answered]
        versions = {s.get("policy_version") for s in states} - {None}
        modes = {s.get("mode") for s in states} - {None}
        by_worker = dict(answered)
        return {
            "paused": any(s.get("paused") for s in states),
            "mode": modes.pop() if len(modes) == 1 else None,
            "policy_version": versions.pop() if len(versions) == 1 else None,
            "on_engine": sum(s.get("on_engine", 0) for s in states),
            "waiting": sum(s.get("waiting", 0) for s in states),
            "workers": [{"worker": w, **by_worker[w]} if w in by_worker else {"worker": w, "lost": self._why(w)}
                        for w in range(self.siblings.count)],
        }

    async def _health(self, answers: list[tuple[int, int | None, list[tuple[bytes, bytes]], bytes]],
                      send: Send) -> None:
        workers, model = [], None
        for w, status, _, content in answers:
            pid = self.siblings.pids[w] if w < len(self.siblings.pids) else None
            if status == 200:
                own = json.loads(content)
                model = model or own.get("model")
                workers.append({"worker": w, "pid": pid, "status": own.get("status", "ok")})
            else:
                workers.append({"worker": w, "pid": pid, "status": "lost", "why": self._why(w)})
        serving = [w for w in workers if w["status"] == "ok"]
        status = "ok" if len(serving) == len(workers) else "degraded" if serving else "down"
        lost = [w["worker"] for w in workers if w["status"] == "lost"]
        body: dict[str, Any] = {"status": status, "model": model, "workers": workers}
        if lost:
            body["why"] = (f"gateway worker(s) {', '.join(map(str, lost))} exited: the sessions they held are lost "
                           "(their requests answer 503 gateway_worker_lost); the others serve")
        await _answer(send, 200 if serving else 503, body)

    def _why(self, worker: int) -> str:
        return self.siblings.lost.get(worker, "does not answer")


async def _body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGone
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` for an app whose request body was already read (and perhaps rewritten) here."""
    delivered = False

    async def replay() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _answer(send: Send, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
    extra = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    await _answer_raw(send, status, [(b"content-type", b"application/json"), *extra], json.dumps(body).encode())


async def _answer_raw(send: Send, status: int, headers: list[tuple[bytes, bytes]], content: bytes) -> None:
    headers = [*headers, (b"content-length", str(len(content)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": content, "more_body": False})

"""``MisbehavingJudgeServerForTests``: an OpenAI-compatible judge that fails on cue.

A test double for what a real judge provider does under load and cannot be
made to do on demand here: rate limits, server errors, hangs, garbage. It
serves ``POST /v1/chat/completions`` and ``GET /v1/models`` from a thread
(its own event loop), so it keeps answering while the test's loop is busy::

    with MisbehavingJudgeServerForTests(script=["429", "500", "ok"]) as server:
        verifier = RubricJudgeVerifier({"base_url": server.base_url, "model": "judge"})
        ...
        assert [r.behaviour for r in server.requests] == ["429", "500", "ok"]

Each request takes the next behaviour of ``script`` (then ``default``):

``ok`` / ``ok_false``  a verdict with passed true / false (``verdicts`` may
                       override per criterion text: substring → bool)
``429``                rate limited, ``Retry-After: <retry_after>``
``500`` / ``503``      server error
``hang``               never answers (until the server stops)
``slow``               answers ``ok`` after ``slow_sec``
``bad_json``           a well-formed completion whose content is not JSON
``wrong_schema``       content is JSON without ``passed``
``truncated``          JSON cut off mid-string, ``finish_reason: "length"``
``malformed_body``     HTTP 200 whose body is not JSON at all
``context``            HTTP 400 "maximum context length" (as vLLM says it)
``400``                HTTP 400 for another reason

API keys listed in ``rejected_keys`` get HTTP 401 whatever the script says.
``decide(prompt)``, when given, decides each ``ok`` verdict from the judge prompt
(the first user message), e.g. ``decide=lambda prompt: "kit-ok" in evidence(prompt)``:
a scripted judge that still tells a good episode from a bad one.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

BEHAVIOURS = ("ok", "ok_false", "429", "500", "503", "hang", "slow", "bad_json", "wrong_schema", "truncated",
              "malformed_body", "context", "400")


@dataclass
class RecordedRequest:
    """One request as the server saw it."""

    behaviour: str
    api_key: str | None
    body: dict[str, Any]
    at: float
    in_flight: int
    """Requests in flight at the server when this one arrived (itself included)."""

    @property
    def last_user_message(self) -> str:
        users = [m for m in self.body.get("messages", []) if m.get("role") == "user"]
        return users[-1]["content"] if users else ""


@dataclass
class MisbehavingJudgeServerForTests:
    """See the module docstring."""

    script: list[str] = field(default_factory=list)
    default: str = "ok"
    rejected_keys: set[str] = field(default_factory=set)
    verdicts: dict[str, bool] = field(default_factory=dict)
    decide: Callable[[str], bool] | None = None
    retry_after: float = 0.0
    slow_sec: float = 0.2
    model: str = "misbehaving-judge"
    requests: list[RecordedRequest] = field(default_factory=list)

    def __post_init__(self) -> None:
        unknown = [b for b in [*self.script, self.default] if b not in BEHAVIOURS]
        if unknown:
            raise ValueError(f"unknown behaviours {unknown}; choose from {BEHAVIOURS}")
        self._queue: deque[str] = deque(self.script)
        self._lock = threading.Lock()
        self._in_flight = 0
        self.max_in_flight = 0
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._release: asyncio.Event | None = None
        self.port = 0

    # -- lifecycle ----------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> MisbehavingJudgeServerForTests:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        app = Starlette(routes=[Route("/v1/chat/completions", self._chat, methods=["POST"]),
                                Route("/v1/models", self._models, methods=["GET"])])
        config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._serve, args=(sock,), name="misbehaving-judge", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("MisbehavingJudgeServerForTests did not start within 10s")
            time.sleep(0.01)
        return self

    def _serve(self, sock: socket.socket) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._release = asyncio.Event()
            assert self._server is not None
            await self._server.serve(sockets=[sock])

        asyncio.run(main())

    def stop(self) -> None:
        if self._server is None:
            return
        if self._loop is not None and self._release is not None:
            self._loop.call_soon_threadsafe(self._release.set)  # let hanging requests go
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = None

    def __enter__(self) -> MisbehavingJudgeServerForTests:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def then(self, *behaviours: str) -> None:
        """Append behaviours to the script (thread-safe)."""
        with self._lock:
            self._queue.extend(behaviours)

    @property
    def keys_seen(self) -> list[str | None]:
        return [r.api_key for r in self.requests]

    # -- handlers -----------------------------------------------------------------------
    async def _models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    async def _chat(self, request: Request) -> Response:
        try:
            body = await request.json()
        except ClientDisconnect:  # the client gave up (its timeout) before sending everything
            return Response(status_code=499)
        auth = request.headers.get("authorization", "")
        key = auth.removeprefix("Bearer ").strip() or None
        with self._lock:
            behaviour = self._queue.popleft() if self._queue else self.default
            if key is not None and key in self.rejected_keys:
                behaviour = "401"
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
            self.requests.append(RecordedRequest(behaviour, key, body, time.monotonic(), self._in_flight))
        try:
            return await self._respond(behaviour, body)
        finally:
            with self._lock:
                self._in_flight -= 1

    async def _respond(self, behaviour: str, body: dict[str, Any]) -> Response:
        if behaviour == "401":
            return JSONResponse({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error",
                                           "code": "invalid_api_key"}}, status_code=401)
        if behaviour == "429":
            return JSONResponse({"error": {"message": "Rate limit reached", "type": "rate_limit_error"}},
                                status_code=429, headers={"retry-after": str(self.retry_after)})
        if behaviour in ("500", "503"):
            return JSONResponse({"error": {"message": "upstream failure"}}, status_code=int(behaviour))
        if behaviour == "context":
            return JSONResponse({"error": {"message": "This model's maximum context length is 2048 tokens. However, "
                                           "you requested 9000 tokens. Please reduce the length of the messages.",
                                           "type": "BadRequestError", "code": 400}}, status_code=400)
        if behaviour == "400":
            return JSONResponse({"error": {"message": "unknown field 'frobnicate'", "code": 400}}, status_code=400)
        if behaviour == "malformed_body":
            return PlainTextResponse("<html>502 bad gateway</html>", status_code=200)
        if behaviour == "hang":
            assert self._release is not None
            await self._release.wait()
            return JSONResponse({"error": {"message": "server stopping"}}, status_code=503)
        if behaviour == "slow":
            await asyncio.sleep(self.slow_sec)
            behaviour = "ok"
        if behaviour == "bad_json":
            return self._completion(body, "Sure! The criterion is met, I think. passed: yes")
        if behaviour == "wrong_schema":
            return self._completion(body, json.dumps({"rationale": "looks fine"}))
        if behaviour == "truncated":
            return self._completion(body, '{"rationale": "The answer names Paris and then goes on', "length")
        passed = behaviour == "ok"
        if passed and self.decide is not None:
            passed = bool(self.decide(_prompt(body)))
        criterion = _criterion(body)
        for needle, value in self.verdicts.items():
            if needle in criterion:
                passed = value
        return self._completion(body, json.dumps({"rationale": f"checked: {criterion[:60]}", "passed": passed}))

    def _completion(self, body: dict[str, Any], content: str, finish_reason: str = "stop") -> Response:
        return JSONResponse({
            "id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", self.model),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
        })


def _prompt(body: dict[str, Any]) -> str:
    users = [m.get("content", "") for m in body.get("messages", []) if m.get("role") == "user"]
    return users[0] if users else ""


def evidence(prompt: str) -> str:
    """What a judge prompt shows of the agent's work: its final answer and the files report (not the task, not the
    criterion)."""
    work = prompt.split("# The agent's final answer", 1)[-1]
    return work.split("\n# Criterion\n", 1)[0]


def _criterion(body: dict[str, Any]) -> str:
    text = _prompt(body)
    marker = "# Criterion\n"
    if marker in text:
        return text.split(marker, 1)[1].split("\n\n", 1)[0].strip()
    return text

"""For the tests of a harness that runs a real agent: a scripted engine behind the real policy gateway.

Why a double: such tests check how the harness drives its agent and turns what the agent did into a trajectory, so
the model's replies must be chosen (a tool call, then a final answer; a delay; an HTTP failure); SmolLM2-135M answers
with noise. Everything else stays real: the agent binary, the policy gateway (each dialect, chat template, tool
parsing, streaming, token bookkeeping), the tokenizer and the sandbox. The same harness runs against the real engine
in its ``engine`` tests.

- :class:`ScriptedEngineForTests`: plays vLLM's ``/v1/completions`` (token-id prompts, SSE streaming) with scripted
  replies: text (tool calls in Hermes markup, which the gateway parses), :class:`EngineFailureForTests`,
  :class:`Later`.
- :func:`scripted_gateway`: the real :class:`~tackroom_gateway.PolicyGateway` in front of one; :func:`serve` serves
  any ASGI app in this event loop.
- :class:`ScriptedGatewayForTests`: the conformance kit's ``model_server=`` (``tackroom.testing.harness_self_check``).
- :func:`tool_call`; :func:`agent_processes` and :func:`still_running` (what a stopped run left in the sandbox).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tackroom import Sandbox
from tackroom_agent_kit.control import RUN_MARK
from tackroom_gateway import PROBE_USER, InLoopServer

Reply = str | Callable[[str], str]
"""What the "model" says next: fixed text, or a function of the decoded prompt."""


def tool_call(name: str, **arguments: Any) -> str:
    """The text a Hermes-style model writes to call a tool (what the gateway's parser reads)."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


LINGER_SEC = 5.0
"""How long a process killed a moment ago may still be listed: SIGKILL takes effect when the process next runs, which
on a loaded machine is not at once. The checks below wait up to this long for it to go."""


async def agent_processes(sandbox: Sandbox) -> str:
    """The ``/proc/<pid>/environ`` of every process in the sandbox that an agent run started and that is still there
    after up to :data:`LINGER_SEC` (empty: none is left)."""
    return await _lingering(sandbox, f"grep -l {RUN_MARK} /proc/[0-9]*/environ 2>/dev/null | grep -v self",
                            lambda listed: listed)


async def still_running(sandbox: Sandbox, command: str) -> bool:
    """Whether a process whose arguments contain ``command`` is in the sandbox after up to :data:`LINGER_SEC`."""
    return bool(await _lingering(sandbox, "ps -eo args", lambda listed: command if command in listed else ""))


async def _lingering(sandbox: Sandbox, probe: str, found: Callable[[str], str]) -> str:
    loop = asyncio.get_running_loop()
    give_up = loop.time() + LINGER_SEC
    while True:
        seen = found((await sandbox.exec(probe, timeout=30)).stdout.strip())
        if not seen or loop.time() >= give_up:
            return seen
        await asyncio.sleep(0.1)


@dataclass
class EngineFailureForTests:
    """A scripted HTTP failure instead of a completion."""

    status: int
    message: str


@dataclass
class Later:
    """A reply given only after ``delay_s`` (or when the engine is released)."""

    reply: str | EngineFailureForTests
    delay_s: float


@dataclass
class ScriptedEngineForTests:
    """Plays vLLM's ``/v1/completions`` (token-id prompts, SSE streaming) with scripted replies (why a double: see
    the module's docstring)."""

    tokenizer: Any
    replies: list[Reply | EngineFailureForTests | Later] = field(default_factory=list)
    default: Reply | EngineFailureForTests | Later | None = None
    """Said once the script is used up (None: an HTTP 500, as an engine out of answers)."""
    max_model_len: int = 32768
    model: str = "scripted"
    delay_s: float = 0.0
    """Seconds to wait before answering (to test timeouts); :meth:`release` ends every wait."""
    prompts: list[str] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    """Each turn's request body as the gateway sent it (sampling settings, a grammar), in order."""
    _released: asyncio.Event = field(default_factory=asyncio.Event)

    def release(self) -> None:
        """Answer every delayed request now (so a test's servers shut down without waiting them out)."""
        self._released.set()

    def app(self) -> Starlette:
        return Starlette(routes=[
            Route("/v1/models", self._models, methods=["GET"]),
            Route("/v1/completions", self._completions, methods=["POST"]),
        ])

    async def _models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": self.model, "object": "model", "max_model_len": self.max_model_len}]})

    def _next(self, prompt: str) -> tuple[str | EngineFailureForTests | None, float]:
        reply = self.replies.pop(0) if self.replies else self.default
        if callable(reply):
            reply = reply(prompt)
        if isinstance(reply, Later):
            return reply.reply, reply.delay_s
        return reply, self.delay_s

    async def _completions(self, request: Request) -> Response:
        body = json.loads(await request.body())
        if body.get("user") == PROBE_USER:  # the gateway asking whether the engine is alive: not a turn
            ids = body["prompt"][:1]
            return JSONResponse({"id": "cmpl-probe", "object": "text_completion", "model": self.model, "choices": [{
                "index": 0, "text": self.tokenizer.decode(ids), "logprobs": self._logprobs(ids),
                "finish_reason": "length", "token_ids": ids, "prompt_token_ids": body["prompt"]}]})
        prompt = self.tokenizer.decode(body["prompt"], skip_special_tokens=False)
        self.prompts.append(prompt)
        self.bodies.append(body)
        reply, delay_s = self._next(prompt)
        if delay_s:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._released.wait(), delay_s)
        if reply is None:
            reply = EngineFailureForTests(500, "ScriptedEngineForTests: script exhausted")
        if isinstance(reply, EngineFailureForTests):
            return JSONResponse({"error": {"message": reply.message, "type": "BadRequestError", "code": reply.status}},
                                status_code=reply.status)
        ids = self.tokenizer.encode(reply, add_special_tokens=False) + [self.tokenizer.convert_tokens_to_ids("<|im_end|>")]
        if not body.get("stream"):
            return JSONResponse({"id": "cmpl-scripted", "object": "text_completion", "model": self.model, "choices": [{
                "index": 0, "text": self.tokenizer.decode(ids, skip_special_tokens=True), "logprobs": self._logprobs(ids),
                "finish_reason": "stop", "token_ids": ids, "prompt_token_ids": body["prompt"]}]})
        return StreamingResponse(self._events(body["prompt"], ids), media_type="text/event-stream")

    def _logprobs(self, ids: list[int]) -> dict[str, Any]:
        toks = [self.tokenizer.decode([i]) for i in ids]
        return {"tokens": toks, "token_logprobs": [-0.5] * len(ids), "top_logprobs": [{t: -0.5} for t in toks],
                "text_offset": [0] * len(ids)}

    async def _events(self, prompt: list[int], ids: list[int]) -> AsyncIterator[bytes]:
        sent = ""
        for k, tid in enumerate(ids):
            upto = self.tokenizer.decode(ids[: k + 1], skip_special_tokens=True)
            choice = {"index": 0, "text": upto[len(sent):], "logprobs": self._logprobs([tid]),
                      "finish_reason": "stop" if k == len(ids) - 1 else None, "token_ids": [tid]}
            sent = upto
            if k == 0:
                choice["prompt_token_ids"] = prompt
            event = {"id": "cmpl-scripted", "object": "text_completion", "choices": [choice]}
            yield b"data: " + json.dumps(event).encode() + b"\n\n"
            await asyncio.sleep(0)
        yield b"data: [DONE]\n\n"


@contextlib.asynccontextmanager
async def serve(app: Any) -> AsyncIterator[str]:
    """Serve an ASGI app on a free loopback port in this event loop; yields its ``/v1`` base URL."""
    server = InLoopServer(app, what="the scripted engine", graceful_timeout_s=1)
    port = await server.start()
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        await server.stop()


@contextlib.asynccontextmanager
async def scripted_gateway(engine: ScriptedEngineForTests) -> AsyncIterator[Any]:
    """The real :class:`~tackroom_gateway.PolicyGateway` in front of a scripted engine."""
    from tackroom_gateway import ChatTemplate, EngineSettings, GatewaySettings, PolicyGateway

    async with serve(engine.app()) as url:
        settings = GatewaySettings(engine=EngineSettings(base_url=url, backoff_s=0.01, retries=0))
        async with PolicyGateway(settings, template=ChatTemplate(engine.tokenizer)) as gateway:
            try:
                yield gateway
            finally:
                engine.release()


class ScriptedGatewayForTests:
    """The conformance kit's scripted model, served through the real policy gateway (``model_server=``).

    Why: agents stream, and each speaks its vendor's dialect (OpenAI chat or Responses, Anthropic Messages, Gemini);
    the kit's own ScriptedChatServerForTests answers plain OpenAI chat. Here each scripted reply is the model's raw
    text (tool calls in Hermes markup), produced by :class:`ScriptedEngineForTests` and turned into the agent's
    dialect by the real gateway, exactly as in a run. ``ScriptedReply`` errors become engine errors (a 500, a
    context-length 400), which the gateway classifies and shapes for the agent.
    """

    def __init__(self, replies: list[Any], *, tokenizer: Any, then: str = "repeat_last",
                 max_model_len: int | None = None, model: str = "scripted") -> None:
        answers = [self._answer(r) for r in replies]
        last = answers.pop() if answers and then == "repeat_last" else None
        self.engine = ScriptedEngineForTests(tokenizer, replies=answers, default=last,
                                             max_model_len=max_model_len or 32768, model=model)
        self._stack = contextlib.AsyncExitStack()
        self.gateway: Any = None
        self._sessions = 0

    @staticmethod
    def _answer(reply: Any) -> str | EngineFailureForTests | Later:
        if isinstance(reply, str):
            return reply
        answer: str | EngineFailureForTests = reply.content
        if reply.status >= 400:
            answer = EngineFailureForTests(reply.status, reply.error_message)
        return Later(answer, reply.delay_s) if reply.delay_s else answer

    @property
    def requests(self) -> list[str]:
        return self.engine.prompts

    def policy(self) -> Any:
        self._sessions += 1
        return self.gateway.policy(f"kit-{self._sessions}")

    async def __aenter__(self) -> ScriptedGatewayForTests:
        self.gateway = await self._stack.enter_async_context(scripted_gateway(self.engine))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

"""A scripted stand-in for the engine's ``/v1/completions``, for unit tests of the gateway's bookkeeping."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


@dataclass
class Scripted:
    """One scripted answer: the completion ids the "model" produces (or an HTTP failure)."""

    completion_ids: list[int] = field(default_factory=list)
    finish_reason: str = "stop"
    status: int = 200
    error: str | None = None
    die_after_tokens: int | None = None
    """Streaming only: drop the connection after this many tokens, as a killed engine does."""
    delay_s: float = 0.0
    stop_reason: int | str | None = None
    """vLLM's ``stop_reason``: the stop string (or stop token id) the completion ended on."""
    token_delay_s: float = 0.0
    """Streaming only: the wait between two tokens, as a real engine's decoding takes time."""
    burst: bool = False
    """Streaming only: every event (one per token) and ``[DONE]`` in one write, as the gateway finds them when it
    reads the engine late."""


class FakeEngineForTests:
    """Plays the engine with scripted completion ids. Used ONLY where a real engine is not the point.

    Why a double here: these tests pin the gateway's token bookkeeping against
    exact, chosen completion ids, including ids a real engine produces only by
    chance (a non-canonical split of a word, whitespace inside tool-call JSON,
    a Qwen3 ``<think>`` block) and failures that cannot be ordered from vLLM on
    demand (a 503 then success, a context-length 400, a connection dropped
    after N tokens). No Qwen3 model can run on this machine, so the Qwen3 cases
    have no real engine at all. The same behaviours are exercised against the
    real vLLM in ``test_engine_e2e.py`` (marked ``engine``).

    It speaks the subset of vLLM's ``/v1/completions`` the gateway uses: token-id
    prompts, ``return_token_ids``, ``logprobs`` and SSE streaming, and decodes
    text with the real tokenizer (skipping special tokens, as vLLM does).
    """

    def __init__(self, tokenizer: Any, *, model: str = "fake-model", max_model_len: int = 4096) -> None:
        self.tokenizer = tokenizer
        self.model = model
        self.max_model_len = max_model_len
        self.script: list[Scripted] = []
        self.default: Callable[[list[int]], Scripted] | None = None
        self.requests: list[dict[str, Any]] = []
        self.app = Starlette(
            routes=[
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/v1/completions", self._completions, methods=["POST"]),
            ]
        )

    def push(self, *answers: Scripted) -> None:
        self.script.extend(answers)

    def push_text(self, text: str, finish_reason: str = "stop", *, close: bool = True) -> list[int]:
        """Script the canonical tokenization of ``text`` (+ the end-of-turn id when ``close``)."""
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        if close:
            ids = ids + [self.tokenizer.convert_tokens_to_ids("<|im_end|>")]
        self.push(Scripted(completion_ids=ids, finish_reason=finish_reason))
        return ids

    async def _models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": self.model, "object": "model", "max_model_len": self.max_model_len}]})

    def _next(self, prompt: list[int]) -> Scripted:
        if self.script:
            return self.script.pop(0)
        if self.default is not None:
            return self.default(prompt)
        return Scripted(status=500, error="FakeEngineForTests: script exhausted")

    def _lp(self, ids: list[int], start: int = 0) -> dict[str, Any]:
        toks = [self.tokenizer.decode([i]) for i in ids]
        return {"tokens": toks, "token_logprobs": [-0.25 - 0.001 * (start + k) for k in range(len(ids))], "top_logprobs": [{t: -0.25} for t in toks], "text_offset": [0] * len(ids)}

    async def _completions(self, request: Request) -> Response:
        body = json.loads(await request.body())
        self.requests.append(body)
        prompt = body["prompt"]
        answer = self._next(prompt)
        if answer.delay_s:
            await asyncio.sleep(answer.delay_s)
        if answer.status != 200:
            return JSONResponse({"error": {"message": answer.error or "fake failure", "type": "BadRequestError", "code": answer.status}}, status_code=answer.status)
        ids = answer.completion_ids
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        if not body.get("stream"):
            return JSONResponse(
                {
                    "id": "cmpl-fake",
                    "object": "text_completion",
                    "model": self.model,
                    "choices": [
                        {
                            "index": 0,
                            "text": text,
                            "logprobs": self._lp(ids),
                            "finish_reason": answer.finish_reason,
                            "stop_reason": answer.stop_reason,
                            "token_ids": ids,
                            "prompt_token_ids": prompt,
                        }
                    ],
                }
            )

        async def events() -> AsyncIterator[bytes]:
            if answer.burst:
                yield b"".join([event async for event in one_by_one()])
            else:
                async for event in one_by_one():
                    yield event

        async def one_by_one() -> AsyncIterator[bytes]:
            sent_text = ""
            for k, tid in enumerate(ids):
                if answer.die_after_tokens is not None and k >= answer.die_after_tokens:
                    raise ConnectionResetError("FakeEngineForTests: engine died")
                upto = self.tokenizer.decode(ids[: k + 1], skip_special_tokens=True)
                delta, sent_text = upto[len(sent_text) :], upto
                choice = {
                    "index": 0,
                    "text": delta,
                    "logprobs": self._lp([tid], start=k),
                    "finish_reason": answer.finish_reason if k == len(ids) - 1 else None,
                    "stop_reason": answer.stop_reason if k == len(ids) - 1 else None,
                    "token_ids": [tid],
                }
                if k == 0:
                    choice["prompt_token_ids"] = prompt
                yield b"data: " + json.dumps({"id": "cmpl-fake", "object": "text_completion", "choices": [choice]}).encode() + b"\n\n"
                await asyncio.sleep(answer.token_delay_s)
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")


@contextlib.asynccontextmanager
async def serve_app(app: Any) -> AsyncIterator[str]:
    """Serve an ASGI app on a free loopback port for the duration; yields its ``/v1`` base URL."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error", lifespan="off"))
    task = asyncio.create_task(server.serve())
    for _ in range(500):
        if server.started:
            break
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


@contextlib.asynccontextmanager
async def gateway_over_fake(tokenizer: Any, *, max_model_len: int = 4096, **engine_options: Any) -> AsyncIterator[tuple[FakeEngineForTests, Any]]:
    """A :class:`FakeEngineForTests` on a real socket and a started ``PolicyGateway`` in front of it."""
    from tackroom_gateway import ChatTemplate, EngineSettings, GatewaySettings, PolicyGateway

    fake = FakeEngineForTests(tokenizer, max_model_len=max_model_len)
    async with serve_app(fake.app) as url:
        settings = GatewaySettings(engine=EngineSettings(base_url=url, backoff_s=0.01, **engine_options))
        gw = PolicyGateway(settings, template=ChatTemplate(tokenizer))
        await gw.start()
        try:
            yield fake, gw
        finally:
            await gw.stop()


# -- engines written on raw sockets (what a connection carries, counted exactly) ----------------------
COMPLETION = {"choices": [{"index": 0, "text": "x", "token_ids": [5], "prompt_token_ids": [1, 2],
                           "finish_reason": "length", "stop_reason": None, "logprobs": None}]}
"""A one-token completion as an engine's JSON body."""


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One HTTP/1.1 request off a keep-alive connection (its head, then as many body bytes as it says); raises
    ``asyncio.IncompleteReadError`` when the client closed the connection."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    await reader.readexactly(length)
    return head

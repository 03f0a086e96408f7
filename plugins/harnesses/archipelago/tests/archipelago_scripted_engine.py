"""A scripted policy: an engine double for ``/v1/completions`` that answers with fixed texts, as real token ids.

A test fixture, not a product feature: each request pops the next scripted
reply, tokenizes it with the real SmolLM2 tokenizer, closes it with
``<|im_end|>`` and returns ids, logprobs and the finish reason the way vLLM
does. It records every prompt so tests can check what the harness sent.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tackroom_gateway import PROBE_USER, ChatTemplate

FILL = "<fill the context>"


class ScriptedEngine:
    def __init__(self, replies: list[str | tuple[str, str]], *, max_model_len: int = 4096) -> None:
        self.replies = list(replies)
        self.max_model_len = max_model_len
        self.template = ChatTemplate.from_path("smollm2")
        self.requests: list[dict[str, Any]] = []
        self.app = Starlette(routes=[Route("/v1/models", self._models), Route("/v1/completions", self._complete, methods=["POST"])])
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task | None = None
        self.url = ""

    async def _models(self, request: Request) -> JSONResponse:
        return JSONResponse({"data": [{"id": "scripted", "max_model_len": self.max_model_len}]})

    async def _complete(self, request: Request) -> JSONResponse:
        body = await request.json()
        if "prompt" not in body:  # like vLLM: a request without a prompt is a 400, not a turn
            return JSONResponse({"error": {"message": "prompt: field required"}}, status_code=400)
        if body.get("user") == PROBE_USER:  # the policy gateway's liveness probe is not a turn
            reply: str | tuple[str, str] = ("ok", "length")
        else:
            self.requests.append(body)
            if not self.replies:
                return JSONResponse({"error": {"message": "the script ran out of replies"}}, status_code=400)
            reply = self.replies.pop(0)
        if reply == FILL:  # run into the context: as many tokens as the harness allowed, cut off
            ids = self.template.encode(" word") * int(body["max_tokens"])
            text, finish = self.template.decode(ids), "length"
        else:
            text, finish = (reply, "stop") if isinstance(reply, str) else reply
            ids = self.template.encode(text)
            if finish == "stop":
                ids.append(self.template.end_of_turn_id)
        logprobs = [-0.1 - 0.01 * i for i in range(len(ids))]
        return JSONResponse({"choices": [{"index": 0, "text": text, "token_ids": ids, "prompt_token_ids": body["prompt"],
                                          "logprobs": {"token_logprobs": logprobs, "tokens": [str(i) for i in ids]},
                                          "finish_reason": finish, "stop_reason": None}]})

    async def __aenter__(self) -> ScriptedEngine:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()
        self._server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=port, log_level="warning"))
        self._task = asyncio.create_task(self._server.serve())
        while not self._server.started:
            await asyncio.sleep(0.01)
        self.url = f"http://127.0.0.1:{port}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None and self._task is not None
        self._server.should_exit = True
        await asyncio.wait_for(self._task, 10)


def call(name: str, **arguments: Any) -> str:
    """A Hermes-format tool call, as SmolLM2 with tackroom's template writes it."""
    import json

    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


class ScriptedChatEngine:
    """A scripted policy behind ``/v1/chat/completions`` only (a vision model's API, say): each request pops the
    next reply, a text or a function of the request body (so a script can look at what it was sent). It
    records every request; ``/v1/completions`` does not exist, so the harness picks the chat endpoint."""

    def __init__(self, replies: list[Any], *, max_model_len: int = 8192) -> None:
        self.replies = list(replies)
        self.max_model_len = max_model_len
        self.requests: list[dict[str, Any]] = []
        self.app = Starlette(routes=[Route("/v1/models", self._models),
                                     Route("/v1/chat/completions", self._chat, methods=["POST"])])
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task | None = None
        self.url = ""

    async def _models(self, request: Request) -> JSONResponse:
        return JSONResponse({"data": [{"id": "scripted-vision", "max_model_len": self.max_model_len}]})

    async def _chat(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.requests.append(body)
        if not self.replies:
            return JSONResponse({"error": {"message": "the script ran out of replies"}}, status_code=400)
        reply = self.replies.pop(0)
        text = reply(body) if callable(reply) else reply
        return JSONResponse({"choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                          "finish_reason": "stop"}],
                             "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}})

    __aenter__ = ScriptedEngine.__aenter__
    __aexit__ = ScriptedEngine.__aexit__

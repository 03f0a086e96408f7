"""A scripted teacher: an OpenAI-compatible engine whose every reply a Python function writes.

For demonstrations on tasks where no model does well yet: a script that knows how to solve the task family (read
the file the instruction names, then answer with the word it holds) plays the teacher, ``tackroom collect`` runs it
under any harness and keeps the episodes that pass.

The script is a function ``reply(prompt: str) -> str``: ``prompt`` is the conversation so far as the chat template
renders it (special tokens included: ``<|im_start|>user\\n...<|im_end|>``), and the returned text is what the
"model" writes next, in the model's own format: plain text, or tool calls in its markup (Hermes:
``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``). It runs in the server's event loop: keep it
quick, and raise to fail a request (the caller sees an HTTP 500: an engine error, ``infra``).

Routes, as an engine serves them:

- ``POST /v1/completions``: vLLM's token-id completions (``prompt`` as ids, ``return_token_ids``, ``max_tokens``,
  ``stream``), what the policy gateway and token-level harnesses (``archipelago``) call. The reply is tokenized
  with the teacher's tokenizer plus the end-of-turn token, so through the gateway the episode is recorded in that
  tokenizer exactly as an engine's would be.
- ``POST /v1/chat/completions``: chat completions (``messages``, ``tools``, ``stream``), text only: the prompt is
  rendered with the chat template, the reply's tool calls parsed (Hermes or Qwen3 markup). For a harness that
  talks to the endpoint directly.
- ``GET /v1/models``, ``GET /health``.

```bash
python -m tackroom_train.collect.teacher lookup_teacher.py:reply --tokenizer smollm2 --port 8030
```
or, for one collection, ``tackroom collect CONFIG --teacher-script lookup_teacher.py:reply`` (served in-process).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import importlib.util
import json
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tackroom import ConfigError

TeacherScript = Callable[[str], str]
"""What the scripted teacher says next, given the rendered prompt."""


def load_teacher_script(ref: str) -> TeacherScript:
    """``module:function`` (importable) or ``path/to/file.py:function``; a clear :class:`ConfigError` otherwise."""
    where, sep, name = ref.rpartition(":")
    if not sep or not where or not name.isidentifier():
        raise ConfigError(f"teacher script {ref!r}: give module:function or path/to/file.py:function")
    try:
        if where.endswith(".py"):
            path = Path(where).expanduser().resolve()
            if not path.is_file():
                raise ConfigError(f"teacher script {ref!r}: no such file: {path}")
            spec = importlib.util.spec_from_file_location(f"tackroom_teacher_{path.stem}", path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except ConfigError:
        raise
    except Exception as exc:  # the script's own import failing: say so, with the cause
        raise ConfigError(f"teacher script {ref!r}: importing {where} failed: {type(exc).__name__}: {exc}") from exc
    function = getattr(module, name, None)
    if not callable(function):
        raise ConfigError(f"teacher script {ref!r}: {where} has no function {name!r}")
    return function


class ScriptedTeacher:
    """The engine: ``script`` writes each reply, ``template`` (a ``tackroom_gateway.ChatTemplate``) renders and
    tokenizes. ``requests`` counts the replies it wrote."""

    def __init__(self, script: TeacherScript, template: Any, *, model: str = "teacher",
                 max_model_len: int = 32768, tool_parser: str = "auto") -> None:
        from tackroom_gateway import get_tool_parser

        self.script = script
        self.template = template
        self.model = model
        self.max_model_len = max_model_len
        name = tool_parser if tool_parser != "auto" else ("qwen3" if template.think_tokens else "hermes")
        self.parser = get_tool_parser(name)
        self.requests = 0

    def app(self) -> Starlette:
        return Starlette(routes=[
            Route("/v1/models", self._models, methods=["GET"]),
            Route("/health", self._health, methods=["GET"]),
            Route("/v1/completions", self._completions, methods=["POST"]),
            Route("/v1/chat/completions", self._chat, methods=["POST"]),
        ])

    # -- the script ------------------------------------------------------------------------------
    def reply(self, prompt: str) -> str:
        """The script's reply to ``prompt``; a script that fails or answers no text raises :class:`RuntimeError`."""
        self.requests += 1
        try:
            text = self.script(prompt)
        except Exception as exc:
            raise RuntimeError(f"the teacher script failed: {type(exc).__name__}: {exc}") from exc
        if not isinstance(text, str):
            raise RuntimeError(f"the teacher script returned {type(text).__name__}, not the reply's text")
        return text

    def reply_ids(self, text: str, max_tokens: int | None) -> tuple[list[int], str]:
        """``text`` in the teacher's tokenizer, closed with the end-of-turn token, cut at ``max_tokens``."""
        ids = self.template.encode(text)
        if self.template.end_of_turn_id is not None:
            ids.append(self.template.end_of_turn_id)
        if max_tokens is not None and len(ids) > max_tokens:
            return ids[:max_tokens], "length"
        return ids, "stop"

    # -- routes ----------------------------------------------------------------------------------
    async def _models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": self.model, "object": "model", "owned_by": "tackroom-teacher", "max_model_len": self.max_model_len}]})

    async def _health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "model": self.model})

    async def _completions(self, request: Request) -> Response:
        from tackroom_gateway import PROBE_USER

        body = await _json_body(request)
        if isinstance(body, Response):
            return body
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            prompt = self.template.encode(prompt)
        if not isinstance(prompt, list) or not all(isinstance(i, int) for i in prompt):
            return _error(400, "prompt must be a list of token ids or a string")
        if body.get("user") == PROBE_USER:  # the gateway asking whether the engine is alive: not a turn
            ids, finish = prompt[:1], "length"
        else:
            try:
                ids, finish = self.reply_ids(self.reply(self.template.decode(prompt)), body.get("max_tokens"))
            except RuntimeError as exc:
                return _error(500, str(exc))
        if body.get("stream"):
            return StreamingResponse(self._completion_events(prompt, ids, finish), media_type="text/event-stream")
        return JSONResponse({"id": f"cmpl-{uuid.uuid4().hex[:12]}", "object": "text_completion", "model": self.model,
                             "created": int(time.time()), "choices": [self._choice(prompt, ids, finish)],
                             "usage": _usage(len(prompt), len(ids))})

    def _choice(self, prompt: list[int], ids: list[int], finish: str | None, *, first: bool = True) -> dict[str, Any]:
        tokens = [self.template.tokenizer.decode([i]) for i in ids]
        choice: dict[str, Any] = {
            "index": 0, "text": self.template.tokenizer.decode(ids, skip_special_tokens=True), "token_ids": ids,
            "finish_reason": finish, "stop_reason": None,
            "logprobs": {"tokens": tokens, "token_logprobs": [0.0] * len(ids), "top_logprobs": [{t: 0.0} for t in tokens],
                         "text_offset": [0] * len(ids)}}
        if first:
            choice["prompt_token_ids"] = prompt
        return choice

    async def _completion_events(self, prompt: list[int], ids: list[int], finish: str) -> AsyncIterator[bytes]:
        for k, token in enumerate(ids):
            choice = self._choice(prompt, [token], finish if k == len(ids) - 1 else None, first=k == 0)
            yield _event({"id": "cmpl-teacher", "object": "text_completion", "model": self.model, "choices": [choice]})
            await asyncio.sleep(0)
        yield b"data: [DONE]\n\n"

    async def _chat(self, request: Request) -> Response:
        body = await _json_body(request)
        if isinstance(body, Response):
            return body
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _error(400, "messages must be a non-empty list")
        try:
            prompt = self.template.render(messages, tools=body.get("tools") or None,
                                          template_kwargs=body.get("chat_template_kwargs") or None)
            text = self.reply(prompt)
        except RuntimeError as exc:
            return _error(500, str(exc))
        except ConfigError as exc:  # the template cannot render these messages
            return _error(400, str(exc))
        parsed = self.parser.parse(text, parse_tools=bool(body.get("tools")))
        message: dict[str, Any] = {"role": "assistant", "content": parsed.content}
        if parsed.tool_calls:
            message["tool_calls"] = [call.openai() for call in parsed.tool_calls]
        finish = "tool_calls" if parsed.tool_calls else "stop"
        usage = _usage(len(self.template.encode(prompt)), len(self.template.encode(text)))
        if body.get("stream"):
            return StreamingResponse(self._chat_events(message, finish), media_type="text/event-stream")
        return JSONResponse({"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion",
                             "created": int(time.time()), "model": self.model,
                             "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage})

    async def _chat_events(self, message: dict[str, Any], finish: str) -> AsyncIterator[bytes]:
        base = {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion.chunk", "model": self.model,
                "created": int(time.time())}
        delta: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
        yield _event({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        calls = [{**call, "index": i} for i, call in enumerate(message.get("tool_calls") or [])]
        if calls:
            yield _event({**base, "choices": [{"index": 0, "delta": {"tool_calls": calls}, "finish_reason": None}]})
        yield _event({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        yield b"data: [DONE]\n\n"


async def _json_body(request: Request) -> dict[str, Any] | Response:
    try:
        body = json.loads(await request.body())
    except ValueError:
        return _error(400, "the request body is not JSON")
    return body if isinstance(body, dict) else _error(400, "the request body is not a JSON object")


def _error(status: int, message: str) -> Response:
    return JSONResponse({"error": {"message": message, "type": "teacher_error", "code": status}}, status_code=status)


def _event(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def teacher_for(script: TeacherScript | str, tokenizer: str, *, model: str = "teacher") -> ScriptedTeacher:
    """A :class:`ScriptedTeacher` of ``script`` (a function or a :func:`load_teacher_script` reference) with the
    chat template of ``tokenizer`` (``smollm2``, ``qwen3`` or a local folder)."""
    from tackroom_gateway import ChatTemplate, load_tokenizer

    function = load_teacher_script(script) if isinstance(script, str) else script
    try:
        template = ChatTemplate(load_tokenizer(tokenizer))
    except Exception as exc:  # a folder without tokenizer.json, a fetch that failed, no chat template
        raise ConfigError(f"teacher tokenizer {tokenizer!r} cannot be loaded: {exc}") from exc
    return ScriptedTeacher(function, template, model=model)


@contextlib.asynccontextmanager
async def serve_teacher(teacher: ScriptedTeacher, *, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[str]:
    """Serve ``teacher`` in this event loop while open; yields its ``/v1`` base URL."""
    from tackroom_gateway import InLoopServer

    server = InLoopServer(teacher.app(), what="the scripted teacher", host=host, port=port, graceful_timeout_s=1)
    bound = await server.start()
    try:
        yield f"http://{host}:{bound}/v1"
    finally:
        await server.stop()


def main(argv: list[str] | None = None) -> None:
    """``python -m tackroom_train.collect.teacher SCRIPT --tokenizer NAME [--host H] [--port P] [--model NAME]``."""
    parser = argparse.ArgumentParser(prog="python -m tackroom_train.collect.teacher", description=__doc__.split("\n")[0])
    parser.add_argument("script", help="module:function or path/to/file.py:function (reply(prompt) -> text)")
    parser.add_argument("--tokenizer", required=True, help="smollm2, qwen3 or a local tokenizer folder")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8030)
    parser.add_argument("--model", default="teacher", help="the model name /v1/models advertises")
    args = parser.parse_args(argv)
    try:
        teacher = teacher_for(args.script, args.tokenizer, model=args.model)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    import uvicorn

    print(f"scripted teacher {args.script} at http://{args.host}:{args.port}/v1 (model {args.model!r})", flush=True)
    uvicorn.run(teacher.app(), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()

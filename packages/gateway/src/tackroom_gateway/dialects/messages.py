"""Anthropic's Messages API (``POST /v1/messages``, ``POST /v1/messages/count_tokens``) on the gateway's chat turn.

What it translates, both ways:

* ``system`` (a string or text blocks) -> one system message, and so does a ``system`` message inside ``messages``
  (in place); ``cache_control`` anywhere is ignored (the engine has its own prefix cache);
* a user message's ``tool_result`` blocks -> one ``tool`` message each, in order, then its text blocks -> one user
  message; an assistant message's text -> ``content``, ``tool_use`` -> ``tool_calls`` (the id kept, ``input`` as the
  arguments' JSON), ``thinking`` -> ``reasoning_content`` (signatures cannot be honoured: the text is kept);
* ``tools`` -> OpenAI function tools, ``tool_choice`` auto/any/tool/none -> auto/required/named/none,
  ``stop_sequences`` -> ``stop``, ``temperature``/``top_p``/``top_k``/``max_tokens`` as they are,
  ``output_config.format`` (a JSON schema) -> ``response_format``;
* the turn's reply -> ``content`` blocks ``[thinking?, text?, tool_use...]`` with the chat tool call ids as the
  ``tool_use`` ids, so the client's next request carries them back unchanged and the turn extends the same
  token branch.

What it refuses (400 ``invalid_request_error``, before the engine is asked): images and documents (the engine
takes token ids, which carry no pixels), Anthropic's server tools (``web_search_*``, ``bash_*``,
``text_editor_*``, ...), MCP servers, a final assistant message (a prefill would be re-tokenized text, not the
model's own ids), a request without ``max_tokens``. ``metadata``, ``thinking``, ``service_tier``,
``context_management``, ``output_config.effort``, ``cache_control`` and ``anthropic-beta`` headers are accepted and
change nothing.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.responses import JSONResponse

from tackroom_gateway.dialects.base import Dialect, DialectCall
from tackroom_gateway.errors import (
    BadRequestError,
    ContextLengthExceededError,
    EngineRateLimitedError,
    EngineRequestInterruptedError,
    EngineUnavailableError,
    GatewayError,
)
from tackroom_gateway.protocol import ChatCompletionRequest, body_json, problems
from tackroom_gateway.streaming import sse
from tackroom_gateway.tito import TitoSession

TEXT_ONLY = "the served model reads text only"

_REFUSED_BLOCKS = {
    "image": f"an image block: {TEXT_ONLY}; send the picture's description as text",
    "document": f"a document block: {TEXT_ONLY}; send the document's text as a text block",
}


class MessagesRequest(BaseModel):
    """A ``POST /v1/messages`` body; the fields the gateway reads. Others (``anthropic-beta`` features it does not
    know) are accepted and ignored, as a client that sends them still gets a well-formed answer."""

    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[dict[str, Any]]
    max_tokens: int | None = Field(default=None, ge=1)
    """Required by ``/v1/messages`` (checked there); ``count_tokens`` takes none."""
    system: str | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop_sequences: list[str] | None = None
    stream: bool = False
    metadata: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None
    service_tier: str | None = None
    context_management: dict[str, Any] | None = None
    mcp_servers: list[dict[str, Any]] | None = None
    output_config: dict[str, Any] | None = None
    """``effort`` is ignored; ``format`` (a JSON schema) constrains the answer."""
    output_format: dict[str, Any] | None = None
    """The structured-outputs beta's spelling of ``output_config.format``."""

    @classmethod
    def parse(cls, raw: bytes, *, needs_max_tokens: bool) -> MessagesRequest:
        data = body_json(raw)
        if not isinstance(data, dict):
            raise BadRequestError("request body must be a JSON object")
        try:
            req = cls.model_validate(data)
        except ValidationError as exc:
            raise BadRequestError(problems(exc)) from exc
        if needs_max_tokens and req.max_tokens is None:
            raise BadRequestError("max_tokens: Field required")
        if req.mcp_servers:
            raise BadRequestError("mcp_servers: the gateway connects to no MCP servers; give the tools to the client "
                                  "and send them as client tools (name, description, input_schema)")
        if not req.messages:
            raise BadRequestError("messages: at least one message is required")
        return req


# -- request: Anthropic -> chat ---------------------------------------------------------------------------
def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not all(isinstance(b, dict) and isinstance(b.get("type"), str) for b in content):
        raise BadRequestError(f"{where}.content must be a string or a list of content blocks, each with a type")
    return content


def _refuse(block: dict[str, Any], where: str, allowed: str) -> BadRequestError:
    kind = block["type"]
    if kind in _REFUSED_BLOCKS:
        return BadRequestError(f"{where} is {_REFUSED_BLOCKS[kind]}")
    return BadRequestError(f"{where} is a {kind!r} block, which the gateway does not serve here ({allowed})")


def _text(block: dict[str, Any], where: str) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise BadRequestError(f"{where}.text must be a string")
    return text


def _tool_result_text(block: dict[str, Any], where: str) -> str:
    content = block.get("content")
    if content is None:
        text = ""
    else:
        parts = []
        for k, part in enumerate(_blocks(content, where)):
            if part["type"] != "text":
                raise _refuse(part, f"{where}.content[{k}]", "a tool result holds text")
            parts.append(_text(part, f"{where}.content[{k}]"))
        text = "\n".join(parts)
    # OpenAI tool messages have no error flag: the model learns it from the text, as Anthropic's own does.
    return f"Error: {text}" if block.get("is_error") else text


def _user(blocks: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    tool_messages: list[dict[str, Any]] = []
    texts: list[str] = []
    for k, block in enumerate(blocks):
        at = f"{where}.content[{k}]"
        if block["type"] == "tool_result":
            if not isinstance(block.get("tool_use_id"), str):
                raise BadRequestError(f"{at}.tool_use_id must be a string")
            tool_messages.append({"role": "tool", "tool_call_id": block["tool_use_id"],
                                  "content": _tool_result_text(block, at)})
        elif block["type"] == "text":
            texts.append(_text(block, at))
        else:
            raise _refuse(block, at, "a user message holds text and tool_result blocks")
    out = tool_messages
    if texts or not tool_messages:
        out = [*out, {"role": "user", "content": "\n".join(texts)}]
    return out


def _assistant(blocks: list[dict[str, Any]], where: str) -> dict[str, Any]:
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[dict[str, Any]] = []
    for k, block in enumerate(blocks):
        at = f"{where}.content[{k}]"
        kind = block["type"]
        if kind == "text":
            texts.append(_text(block, at))
        elif kind == "thinking":
            thinking.append(str(block.get("thinking") or ""))
        elif kind == "redacted_thinking":
            pass  # opaque ciphertext from another server: no text the model could have written
        elif kind == "tool_use":
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                raise BadRequestError(f"{at} needs a string id and name")
            args = json.dumps(block.get("input") if block.get("input") is not None else {}, ensure_ascii=False)
            calls.append({"id": block["id"], "type": "function", "function": {"name": block["name"], "arguments": args}})
        else:
            raise _refuse(block, at, "an assistant message holds text, thinking and tool_use blocks")
    message: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) if texts else None}
    if thinking:
        message["reasoning_content"] = "\n".join(thinking)
    if calls:
        message["tool_calls"] = calls
    return message


def chat_messages(req: MessagesRequest) -> list[dict[str, Any]]:
    """The chat messages an Anthropic request stands for (see the module docstring)."""
    out: list[dict[str, Any]] = []
    if req.system:
        blocks = _blocks(req.system, "system")
        texts = []
        for k, block in enumerate(blocks):
            if block["type"] != "text":
                raise _refuse(block, f"system[{k}]", "system holds text blocks")
            texts.append(_text(block, f"system[{k}]"))
        out.append({"role": "system", "content": "\n".join(texts)})
    for i, m in enumerate(req.messages):
        where = f"messages[{i}]"
        role = m.get("role") if isinstance(m, dict) else None
        if role == "system":
            # Claude Code (2.1.x) sends its "# Environment" section as a system message after the first user
            # message when it does not know the model (any policy served here); it stays in place, turn after turn.
            blocks = _blocks(m.get("content"), where)
            if any(block["type"] != "text" for block in blocks):
                raise BadRequestError(f"{where}: a system message holds text blocks only")
            out.append({"role": "system", "content": "\n".join(_text(b, where) for b in blocks)})
            continue
        if role not in ("user", "assistant"):
            raise BadRequestError(f"{where}.role must be 'user', 'assistant' or 'system'")
        blocks = _blocks(m.get("content"), where)
        out.extend(_user(blocks, where) if role == "user" else [_assistant(blocks, where)])
    if out[-1]["role"] == "assistant":
        raise BadRequestError(
            "the last message is the assistant's: the gateway cannot continue a prefilled assistant turn (its text "
            "would be re-tokenized, not the model's own ids); end with a user message"
        )
    return out


def chat_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Client tools as OpenAI function tools; a server tool (one with a ``type`` other than ``custom``) is refused."""
    if not tools:
        return None
    out = []
    for i, tool in enumerate(tools):
        kind = tool.get("type", "custom") if isinstance(tool, dict) else None
        if kind != "custom":
            raise BadRequestError(
                f"tools[{i}] is Anthropic's server tool {kind!r}, which runs on Anthropic's servers; the gateway "
                "serves client tools only (name, description, input_schema): define it as one and run it yourself"
            )
        if not isinstance(tool.get("name"), str) or not isinstance(tool.get("input_schema"), dict):
            raise BadRequestError(f"tools[{i}] needs a string name and an input_schema object")
        fn: dict[str, Any] = {"name": tool["name"]}
        if tool.get("description"):
            fn["description"] = tool["description"]
        fn["parameters"] = tool["input_schema"]
        out.append({"type": "function", "function": fn})
    return out


def chat_tool_choice(choice: dict[str, Any] | None) -> str | dict[str, Any] | None:
    if choice is None:
        return None
    kind = choice.get("type")
    if kind == "tool":
        if not isinstance(choice.get("name"), str):
            raise BadRequestError("tool_choice of type 'tool' needs a name")
        return {"type": "function", "function": {"name": choice["name"]}}
    mapped = {"auto": "auto", "any": "required", "none": "none"}.get(kind)  # type: ignore[arg-type]
    if mapped is None:
        raise BadRequestError(f"tool_choice.type {kind!r}: use 'auto', 'any', 'tool' (with a name) or 'none'")
    return mapped


def chat_response_format(fmt: Any) -> dict[str, Any]:
    """Anthropic's structured output (``{"type": "json_schema", "schema": ...}``) as OpenAI's ``response_format``,
    which the engine enforces with a grammar."""
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
        raise BadRequestError('output_config.format must be {"type": "json_schema", "schema": {...}}')
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt["schema"]}}


def chat_request(req: MessagesRequest) -> ChatCompletionRequest:
    fields: dict[str, Any] = {
        "model": req.model,
        "messages": chat_messages(req),
        "tools": chat_tools(req.tools),
        "tool_choice": chat_tool_choice(req.tool_choice),
        "stream": req.stream,
        "max_tokens": req.max_tokens,
    }
    fmt = (req.output_config or {}).get("format") or req.output_format
    if fmt is not None:
        fields["response_format"] = chat_response_format(fmt)
    if req.tool_choice and req.tool_choice.get("disable_parallel_tool_use"):
        fields["parallel_tool_calls"] = False
    for ours, theirs in (("temperature", "temperature"), ("top_p", "top_p"), ("top_k", "top_k"), ("stop", "stop_sequences")):
        value = getattr(req, theirs)
        if value is not None:
            fields[ours] = value
    return ChatCompletionRequest.model_validate({k: v for k, v in fields.items() if v is not None})


# -- answer: chat -> Anthropic ----------------------------------------------------------------------------
def _message_id(chat_id: str) -> str:
    return "msg_" + (chat_id.removeprefix("chatcmpl-") or uuid.uuid4().hex)


def _tool_input(arguments: str) -> Any:
    try:
        return json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return {}  # the tool parser hands on only calls whose arguments are JSON


def stop_reason(call: DialectCall, finish_reason: str | None, engine_stop: Any) -> tuple[str, str | None]:
    """Anthropic's ``stop_reason`` and ``stop_sequence``. vLLM names the stop string that ended a completion in
    its ``stop_reason`` (a stop token id is an int, the model's own end of turn None)."""
    if finish_reason == "tool_calls":
        return "tool_use", None
    if finish_reason == "length":
        return "max_tokens", None
    if isinstance(engine_stop, str) and engine_stop in (call.state.get("stop_sequences") or ()):
        return "stop_sequence", engine_stop
    return "end_turn", None


def _usage(input_tokens: int, output_tokens: int) -> dict[str, int]:
    return {"input_tokens": input_tokens, "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


def error_type(status: int) -> str:
    return {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
            404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
            529: "overloaded_error"}.get(status, "api_error" if status >= 500 else "invalid_request_error")


def error_status(exc: GatewayError) -> int:
    """The status an Anthropic client gets: an engine that is down or cut off is 529 ``overloaded_error``, which
    Anthropic's clients (Claude Code included) retry with backoff, as they retry 429 and other 5xx."""
    if isinstance(exc, (EngineUnavailableError, EngineRequestInterruptedError)) and not isinstance(exc, EngineRateLimitedError):
        return 529
    return exc.status_code


def error_object(exc: GatewayError) -> dict[str, Any]:
    message = str(exc)
    if isinstance(exc, ContextLengthExceededError):
        message = f"prompt is too long: {message}"  # the words Anthropic's clients look for before compacting
    return {"type": "error", "error": {"type": error_type(error_status(exc)), "message": message}}


class _Blocks:
    """The content blocks of one streamed answer: opens, fills and closes them as the chat deltas come."""

    def __init__(self) -> None:
        self.index = -1
        self.open: str | None = None
        self.held = ""
        """Whitespace at the end of the text so far: sent once more text follows, dropped at the block's end, so
        that a text block is the reply's text stripped, streamed or not (the parser strips it around tool calls;
        the token history compares assistant text stripped anyway)."""

    def close(self) -> list[bytes]:
        if self.open is None:
            return []
        self.open, self.held = None, ""
        return [sse({"type": "content_block_stop", "index": self.index}, event="content_block_stop")]

    def start(self, block: dict[str, Any]) -> list[bytes]:
        out = self.close()
        self.index += 1
        self.open = block["type"]
        out.append(sse({"type": "content_block_start", "index": self.index, "content_block": block},
                       event="content_block_start"))
        return out

    def delta(self, delta: dict[str, Any]) -> bytes:
        return sse({"type": "content_block_delta", "index": self.index, "delta": delta}, event="content_block_delta")

    def thinking(self, text: str) -> list[bytes]:
        out = [] if self.open == "thinking" else self.start({"type": "thinking", "thinking": "", "signature": ""})
        return [*out, self.delta({"type": "thinking_delta", "thinking": text})]

    def text(self, text: str) -> list[bytes]:
        out = []
        if self.open != "text":
            text = text.lstrip()
            if not text:  # a blank text opens no block (Anthropic refuses blank ones sent back)
                return []
            out = self.start({"type": "text", "text": ""})
        text, self.held = self.held + text, ""
        body = text.rstrip()
        self.held = text[len(body):]
        return [*out, self.delta({"type": "text_delta", "text": body})] if body else out

    def tool_use(self, call: dict[str, Any]) -> list[bytes]:
        fn = call["function"]
        out = self.start({"type": "tool_use", "id": call["id"], "name": fn["name"], "input": {}})
        if fn.get("arguments"):
            out.append(self.delta({"type": "input_json_delta", "partial_json": fn["arguments"]}))
        return [*out, *self.close()]


class MessagesDialect(Dialect):
    name = "anthropic messages"
    paths = ("/v1/messages",)

    def parse(self, raw: bytes, session: TitoSession, path: dict[str, str]) -> DialectCall:
        req = MessagesRequest.parse(raw, needs_max_tokens=True)
        return DialectCall(request=chat_request(req), body=req.model_dump(exclude_unset=True), session=session,
                           state={"model": req.model, "stop_sequences": req.stop_sequences or []})

    def respond(self, call: DialectCall, completion: dict[str, Any]) -> dict[str, Any]:
        choice = completion["choices"][0]
        msg = choice["message"]
        content: list[dict[str, Any]] = []
        if msg.get("reasoning_content"):
            content.append({"type": "thinking", "thinking": msg["reasoning_content"], "signature": ""})
        if (msg.get("content") or "").strip():
            content.append({"type": "text", "text": msg["content"].strip()})
        for tc in msg.get("tool_calls") or []:
            fn = tc["function"]
            content.append({"type": "tool_use", "id": tc["id"], "name": fn["name"], "input": _tool_input(fn["arguments"])})
        reason, sequence = stop_reason(call, choice.get("finish_reason"), choice.get("stop_reason"))
        usage = completion.get("usage") or {}
        return {
            "id": _message_id(completion.get("id", "")),
            "type": "message",
            "role": "assistant",
            "model": completion.get("model"),
            "content": content,
            "stop_reason": reason,
            "stop_sequence": sequence,
            "usage": _usage(usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)),
        }

    async def events(self, call: DialectCall, chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
        blocks = _Blocks()
        started = False
        finish: str | None = None
        engine_stop: Any = None
        try:
            async for chunk in chunks:
                if not started:
                    started = True
                    message = {"id": _message_id(chunk.get("id", "")), "type": "message", "role": "assistant",
                               "model": chunk.get("model"), "content": [], "stop_reason": None, "stop_sequence": None,
                               "usage": _usage(call.prompt_tokens or 0, 0)}
                    yield sse({"type": "message_start", "message": message}, event="message_start")
                    yield sse({"type": "ping"}, event="ping")
                if not chunk["choices"]:  # the last chunk: usage only
                    for event in blocks.close():
                        yield event
                    usage = chunk.get("usage") or {}
                    reason, sequence = stop_reason(call, finish, engine_stop)
                    yield sse({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence},
                               "usage": {"input_tokens": usage.get("prompt_tokens", 0),
                                         "output_tokens": usage.get("completion_tokens", 0)}},
                              event="message_delta")
                    yield sse({"type": "message_stop"}, event="message_stop")
                    continue
                choice = chunk["choices"][0]
                delta = choice.get("delta") or {}
                out: list[bytes] = []
                if delta.get("reasoning_content"):
                    out += blocks.thinking(delta["reasoning_content"])
                if delta.get("content"):
                    out += blocks.text(delta["content"])
                for tc in delta.get("tool_calls") or []:
                    out += blocks.tool_use(tc)
                if choice.get("finish_reason"):
                    finish, engine_stop = choice["finish_reason"], choice.get("stop_reason")
                for event in out:
                    yield event
        except GatewayError as exc:
            yield sse(error_object(exc), event="error")

    def error_body(self, exc: GatewayError) -> dict[str, Any]:
        return error_object(exc)

    def error_response(self, exc: GatewayError) -> JSONResponse:
        return JSONResponse(self.error_body(exc), status_code=error_status(exc), headers=exc.headers())


class CountTokensDialect(MessagesDialect):
    """``POST /v1/messages/count_tokens``: ``{"input_tokens": N}``, the prompt a ``/v1/messages`` turn with this body
    would send now (rendered as the turn would, extending the session's earlier turns), counted, nothing recorded."""

    name = "anthropic count_tokens"
    paths = ("/v1/messages/count_tokens",)

    def parse(self, raw: bytes, session: TitoSession, path: dict[str, str]) -> DialectCall:
        req = MessagesRequest.parse(raw, needs_max_tokens=False)
        return DialectCall(request=chat_request(req), body=req.model_dump(exclude_unset=True), session=session,
                           count=lambda n: {"input_tokens": n})


MESSAGES = MessagesDialect()
COUNT_TOKENS = CountTokensDialect()

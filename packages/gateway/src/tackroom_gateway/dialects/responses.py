"""OpenAI Responses (``POST /v1/responses``), the API the openai SDK's ``client.responses`` and OpenAI's Codex CLI
speak, read onto the gateway's chat turn.

Request: ``instructions`` becomes the first system message; ``input`` items become chat messages (``developer``
is a system message; a run of ``reasoning``, assistant ``message`` and ``function_call`` items is ONE assistant
message, as the turn that produced them was; ``function_call_output`` is a ``tool`` message); ``function`` tools
become chat tools; ``max_output_tokens``, ``temperature``, ``top_p``, ``tool_choice`` and ``text.format`` map onto
their chat fields. What the text-only engine cannot honour (image, file and audio input, OpenAI's hosted tools,
freeform ``custom`` tools, Codex's ``local_shell``) is a 400 naming it, and for Codex the config key that turns it
off. Bookkeeping fields (``store``, ``include``, ``metadata``, ``prompt_cache_key``, ``reasoning``, ...) are accepted.

Answer: a ``response`` object whose ``output`` holds a ``reasoning`` item (when the model reasoned), a ``message``
item (when it wrote text) and one ``function_call`` item per tool call, in that order, which is the order the
assistant message is rebuilt from when the client sends them back. Streamed, the same items arrive as the event
sequence of OpenAI's API (``response.created`` ... ``response.completed``), each event with ``type`` and
``sequence_number``.

``previous_response_id``: a response created with ``store`` (OpenAI's default) is kept in its session, as the
chain of items each response added (its new input items and its output items), so that a follow-up sending only
new items continues the conversation. Instructions are not carried over, as with OpenAI.
"""

from __future__ import annotations

import json
import time
import uuid
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from tackroom_gateway.dialects.base import Dialect, DialectCall
from tackroom_gateway.errors import (
    BadRequestError,
    ContextLengthExceededError,
    EngineRateLimitedError,
    GatewayError,
)
from tackroom_gateway.protocol import ChatCompletionRequest, body_json, problems
from tackroom_gateway.streaming import sse
from tackroom_gateway.tito import TitoSession


class ResponsesRequestError(BadRequestError):
    """A Responses request the gateway refuses; ``code`` and ``param`` as OpenAI's API would answer them."""

    def __init__(self, message: str, *, code: str = "invalid_request", param: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.param = param

    def openai(self) -> dict[str, Any]:
        body = super().openai()
        body["error"]["param"] = self.param
        return body


# How a Codex run stops sending what the engine cannot serve (codex-rs: core/src/tools/spec.rs, config.toml).
_CODEX_WEB_SEARCH = 'for Codex set `web_search = "disabled"` in config.toml (`-c web_search=disabled`)'
_CODEX_NAMESPACE = ("for Codex 0.171 set `[agents] enabled = false` (`-c agents.enabled=false`): its sub-agent tools "
                    "come as a namespace tool (the tackroom codex harness does)")
_CODEX_CUSTOM = ("Codex 0.171 knows apply_patch only as a freeform custom tool: leave it out (the tackroom codex "
                 "harness's model catalog does; the agent edits files with its shell tool)")
_CODEX_LOCAL_SHELL = ("Codex sends it only for models whose family uses the local shell (codex-mini-*): serve the "
                      "policy under another model name so that Codex sends its `shell` function tool")

_HOSTED_TOOLS = {
    "web_search": _CODEX_WEB_SEARCH,
    "web_search_preview": _CODEX_WEB_SEARCH,
    "web_search_2025_08_26": _CODEX_WEB_SEARCH,
    "web_search_preview_2025_03_11": _CODEX_WEB_SEARCH,
    "custom": _CODEX_CUSTOM,
    "local_shell": _CODEX_LOCAL_SHELL,
    "namespace": _CODEX_NAMESPACE,
}
"""Tool types a client may send that have no faithful chat equivalent, with how Codex stops sending them."""

_CALL_ITEMS = {
    "custom_tool_call": _CODEX_CUSTOM,
    "custom_tool_call_output": _CODEX_CUSTOM,
    "local_shell_call": _CODEX_LOCAL_SHELL,
    "local_shell_call_output": _CODEX_LOCAL_SHELL,
    "web_search_call": _CODEX_WEB_SEARCH,
}
"""Input items that can only come from such tools."""

_TEXT_PARTS = ("input_text", "output_text", "text", "summary_text", "reasoning_text")


class ResponsesRequest(BaseModel):
    """``POST /v1/responses`` body. Fields the gateway has no use for (``store`` aside, which decides whether the
    response is kept for ``previous_response_id``) are accepted and ignored, as long as ignoring them changes
    nothing the model sees."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    instructions: str | None = None
    input: str | list[dict[str, Any]] = []
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stream: bool = False
    store: bool | None = None
    previous_response_id: str | None = None
    reasoning: dict[str, Any] | None = None
    text: dict[str, Any] | None = None
    include: list[str] | None = None
    metadata: dict[str, Any] | None = None
    user: str | None = None
    truncation: str | None = None
    background: bool | None = None
    conversation: Any = None
    prompt: Any = None

    @classmethod
    def parse(cls, raw: bytes) -> ResponsesRequest:
        data = body_json(raw, ResponsesRequestError)
        try:
            req = cls.model_validate(data)
        except ValidationError as exc:
            where = str(exc.errors()[0]["loc"][0]) if exc.errors()[0]["loc"] else None
            raise ResponsesRequestError(f"invalid Responses request: {problems(exc)}", param=where) from exc
        if req.background:
            raise ResponsesRequestError("background responses are not supported: the gateway answers while the "
                                        "client waits; drop `background`", param="background")
        if req.conversation is not None:
            raise ResponsesRequestError("conversations are not supported: send the history in `input` or chain "
                                        "responses with `previous_response_id`", param="conversation")
        if req.prompt is not None:
            raise ResponsesRequestError("prompt templates are not supported: send `instructions` and `input`",
                                        param="prompt")
        return req


@dataclass
class _Stored:
    """A kept response: the one it continued and the items it added (its new input, then its output)."""

    previous: str | None
    items: list[dict[str, Any]]


def _part_text(part: Any, where: str) -> str:
    if isinstance(part, str):
        return part
    kind = part.get("type") if isinstance(part, dict) else None
    if kind in _TEXT_PARTS:
        return str(part.get("text") or "")
    if kind == "refusal":
        return str(part.get("refusal") or "")
    if kind in ("input_image", "input_file", "input_audio"):
        what = kind.removeprefix("input_")
        raise ResponsesRequestError(
            f"{where} is an {kind} part: the model behind this gateway reads text only; send the {what}'s content "
            "as input_text (or describe it)", param=where)
    raise ResponsesRequestError(f"{where} has content part type {kind!r}; the gateway reads input_text, output_text "
                                "and refusal parts", param=where)


def _content_text(content: Any, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise ResponsesRequestError(f"{where} must be a string or a list of content parts", param=where)
    # Parts are joined as the chat route joins them, so a conversation reads the same through either dialect.
    return "".join(_part_text(p, f"{where}[{k}]") for k, p in enumerate(content))


def _reasoning_text(item: dict[str, Any], where: str) -> str:
    """The reasoning a ``reasoning`` item carries: its raw ``content`` if any, else its summaries (an
    ``encrypted_content`` blob cannot be read here and is dropped)."""
    content = item.get("content") or []
    if content:
        return _content_text(content, f"{where}.content")
    return "\n\n".join(_part_text(p, f"{where}.summary[{k}]") for k, p in enumerate(item.get("summary") or []))


def _output_text(output: Any, where: str) -> str:
    """A function call's output: a string, or a list of content parts (Codex sends either)."""
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return _content_text(output, where)
    if isinstance(output, dict) and isinstance(output.get("content"), str):
        return output["content"]  # older Codex: {"content": ..., "success": false}
    return json.dumps(output, ensure_ascii=False)


def _messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Responses input items as chat messages. Reasoning, an assistant message and function calls that follow
    one another are one assistant turn (the order this dialect answers them in), so the rebuilt assistant message
    is the one the gateway recorded and the next turn extends it."""
    messages: list[dict[str, Any]] = []
    turn: dict[str, Any] | None = None

    def assistant() -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": None}
        messages.append(msg)
        return msg

    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise ResponsesRequestError(f"{where} must be an object", param=where)
        kind = item.get("type") or ("message" if "role" in item else None)
        role = item.get("role")
        if kind == "reasoning":
            if turn is None or turn["content"] is not None or "tool_calls" in turn or "reasoning_content" in turn:
                turn = assistant()
            turn["reasoning_content"] = _reasoning_text(item, where)
        elif kind == "message" and role == "assistant":
            if turn is None or turn["content"] is not None or "tool_calls" in turn:
                turn = assistant()
            turn["content"] = _content_text(item.get("content"), f"{where}.content")
        elif kind == "function_call":
            name, args, call_id = item.get("name"), item.get("arguments"), item.get("call_id")
            if not isinstance(name, str) or not isinstance(call_id, str):
                raise ResponsesRequestError(f"{where}: a function_call needs name and call_id", param=where)
            if turn is None:
                turn = assistant()
            arguments = args if isinstance(args, str) else json.dumps(args if args is not None else {})
            turn.setdefault("tool_calls", []).append(
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}})
        elif kind == "message":
            turn = None
            if role not in ("user", "system", "developer"):
                raise ResponsesRequestError(f"{where}.role is {role!r}; use user, assistant, system or developer",
                                            param=f"{where}.role")
            # Chat templates know system, not developer: both are the operator's instructions.
            messages.append({"role": "system" if role == "developer" else role,
                             "content": _content_text(item.get("content"), f"{where}.content")})
        elif kind == "function_call_output":
            turn = None
            call_id = item.get("call_id")
            if not isinstance(call_id, str):
                raise ResponsesRequestError(f"{where}: a function_call_output needs call_id", param=where)
            messages.append({"role": "tool", "tool_call_id": call_id,
                             "content": _output_text(item.get("output"), f"{where}.output")})
        elif kind in _CALL_ITEMS:
            raise ResponsesRequestError(
                f"{where} is a {kind} item, which only a {kind.removesuffix('_output').removesuffix('_call')} tool "
                f"produces; the gateway serves function tools only: {_CALL_ITEMS[kind]}", param=where)
        else:
            raise ResponsesRequestError(
                f"{where} has type {kind!r}; the gateway reads message, reasoning, function_call and "
                "function_call_output items (item_reference: send the item itself)", param=where)
    return messages


def _tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind == "function" and isinstance(tool.get("function"), dict):
            out.append(tool)  # already in chat form: the intent is plain
            continue
        if kind == "function":
            name = tool.get("name")
            if not isinstance(name, str) or not name:
                raise ResponsesRequestError(f"{where}: a function tool needs a name", param=f"{where}.name")
            fn: dict[str, Any] = {"name": name}
            if tool.get("description") is not None:
                fn["description"] = tool["description"]
            fn["parameters"] = tool.get("parameters") or {"type": "object", "properties": {}}
            if tool.get("strict") is not None:
                fn["strict"] = tool["strict"]
            out.append({"type": "function", "function": fn})
            continue
        hint = _HOSTED_TOOLS.get(str(kind))
        named = f" ({tool.get('name')!r})" if isinstance(tool, dict) and tool.get("name") else ""
        raise ResponsesRequestError(
            f"{where} has type {kind!r}{named}: the gateway serves `function` tools only (the model behind it "
            f"calls tools in its chat template's JSON format, and OpenAI's hosted tools do not exist here)"
            + (f"; {hint}" if hint else ""),
            code="unsupported_tool_type", param=f"{where}.type")
    return out


def _tool_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    if choice is None or isinstance(choice, str):
        return choice
    if choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    if choice.get("type") == "function" and isinstance(choice.get("function"), dict):
        return choice
    raise ResponsesRequestError(
        f"tool_choice {choice!r}: use 'auto', 'none', 'required' or {{\"type\": \"function\", \"name\": ...}}",
        param="tool_choice")


def _response_format(text: dict[str, Any] | None) -> dict[str, Any] | None:
    fmt = (text or {}).get("format")
    if not fmt or fmt.get("type") == "text":
        return None
    if fmt.get("type") == "json_object":
        return {"type": "json_object"}
    if fmt.get("type") == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if fmt.get(k) is not None}
        return {"type": "json_schema", "json_schema": schema}
    raise ResponsesRequestError(f"text.format type {fmt.get('type')!r}: use text, json_object or json_schema",
                                param="text.format")


def _failure_code(exc: GatewayError) -> str:
    """A failed response's ``error.code`` among OpenAI's: clients act on them (Codex retries ``server_error`` and
    ``rate_limit_exceeded`` and stops on ``context_length_exceeded``); the gateway's own code is in the message
    and in the ``error`` event before it."""
    if isinstance(exc, EngineRateLimitedError):
        return "rate_limit_exceeded"
    if isinstance(exc, ContextLengthExceededError):
        return "context_length_exceeded"
    return "server_error"


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def _usage(usage: dict[str, Any] | None) -> dict[str, Any] | None:
    if usage is None:
        return None
    # The gateway does not see the engine's prefix cache nor split reasoning tokens out; 0 is "not reported".
    return {
        "input_tokens": usage["prompt_tokens"],
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": usage["completion_tokens"],
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage["total_tokens"],
    }


def _reasoning_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    # Raw reasoning, not a summary: OpenAI's shape for models whose reasoning is shown (gpt-oss).
    return {"id": item_id, "type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": text}],
            "encrypted_content": None, "status": status}


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    return {"id": item_id, "type": "message", "role": "assistant", "status": status, "content": [_text_part(text)]}


def _call_item(item_id: str, call: dict[str, Any], status: str = "completed") -> dict[str, Any]:
    fn = call["function"]
    return {"id": item_id, "type": "function_call", "status": status, "call_id": call["id"], "name": fn["name"],
            "arguments": fn["arguments"]}


class ResponsesDialect(Dialect):
    name = "responses"
    paths = ("/v1/responses",)

    def __init__(self) -> None:
        self._stored: weakref.WeakKeyDictionary[TitoSession, dict[str, _Stored]] = weakref.WeakKeyDictionary()
        """Per session, the responses kept for ``previous_response_id``; they go with the session."""

    # -- request ---------------------------------------------------------------------
    def parse(self, raw: bytes, session: TitoSession, path: dict[str, str]) -> DialectCall:
        req = ResponsesRequest.parse(raw)
        new_items: list[dict[str, Any]] = (
            [{"type": "message", "role": "user", "content": req.input}] if isinstance(req.input, str) else req.input
        )
        history = self._history(session, req.previous_response_id) if req.previous_response_id else []
        messages = _messages([*history, *new_items])
        if req.instructions:
            messages.insert(0, {"role": "system", "content": req.instructions})
        if not messages:
            raise ResponsesRequestError("input must not be empty", param="input")
        fields: dict[str, Any] = {
            "messages": messages,
            "model": req.model,
            "stream": req.stream,
            "tools": _tools(req.tools) if req.tools else None,
            "tool_choice": _tool_choice(req.tool_choice),
            "parallel_tool_calls": req.parallel_tool_calls,
            "max_tokens": req.max_output_tokens,
            "temperature": req.temperature,
            "top_p": req.top_p,
            "response_format": _response_format(req.text),
        }
        chat = ChatCompletionRequest(**{k: v for k, v in fields.items() if v is not None})
        state = {"id": _new_id("resp"), "created_at": int(time.time()), "request": req, "new_items": new_items}
        return DialectCall(request=chat, body=req.model_dump(exclude_unset=True), session=session, state=state)

    def _history(self, session: TitoSession, response_id: str) -> list[dict[str, Any]]:
        kept = self._stored.get(session, {})
        chain: list[list[dict[str, Any]]] = []
        at: str | None = response_id
        while at is not None:
            stored = kept.get(at)
            if stored is None:
                raise ResponsesRequestError(
                    f"Previous response with id '{at}' not found: this session keeps the responses it answered "
                    "with store true (the default); send the whole conversation in input instead",
                    code="previous_response_not_found", param="previous_response_id")
            chain.append(stored.items)
            at = stored.previous
        return [item for items in reversed(chain) for item in items]

    def _keep(self, call: DialectCall, output: list[dict[str, Any]]) -> None:
        req: ResponsesRequest = call.state["request"]
        if req.store is False:
            return
        kept = self._stored.setdefault(call.session, {})
        kept[call.state["id"]] = _Stored(previous=req.previous_response_id, items=[*call.state["new_items"], *output])

    # -- answer ------------------------------------------------------------------------
    def _response(self, call: DialectCall, *, model: str, status: str, output: list[dict[str, Any]],
                  usage: dict[str, Any] | None = None, error: dict[str, Any] | None = None) -> dict[str, Any]:
        req: ResponsesRequest = call.state["request"]
        return {
            "id": call.state["id"],
            "object": "response",
            "created_at": call.state["created_at"],
            "status": status,
            "error": error,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": req.instructions,
            "max_output_tokens": req.max_output_tokens,
            "model": model,
            "output": output,
            "parallel_tool_calls": req.parallel_tool_calls is not False,
            "previous_response_id": req.previous_response_id,
            "reasoning": req.reasoning or {"effort": None, "summary": None},
            "store": req.store is not False,
            "temperature": req.temperature,
            "text": req.text or {"format": {"type": "text"}},
            "tool_choice": req.tool_choice or "auto",
            "tools": req.tools or [],
            "top_p": req.top_p,
            "truncation": req.truncation or "disabled",
            "usage": _usage(usage),
            "user": req.user,
            "metadata": req.metadata or {},
        }

    def respond(self, call: DialectCall, completion: dict[str, Any]) -> dict[str, Any]:
        choice = completion["choices"][0]
        msg = choice["message"]
        cut = choice["finish_reason"] == "length"
        output: list[dict[str, Any]] = []
        if msg.get("reasoning_content"):
            output.append(_reasoning_item(_new_id("rs"), msg["reasoning_content"], "completed"))
        if (msg.get("content") or "").strip():
            output.append(_message_item(_new_id("msg"), msg["content"], "incomplete" if cut else "completed"))
        output += [_call_item(_new_id("fc"), c) for c in msg.get("tool_calls") or []]
        self._keep(call, output)
        return self._response(call, model=completion["model"], status="incomplete" if cut else "completed",
                              output=output, usage=completion.get("usage"))

    def events(self, call: DialectCall, chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
        return _EventStream(self, call).run(chunks)


class _EventStream:
    """One streamed response: the chat chunks of a turn as Responses events, items opened and closed in order."""

    def __init__(self, dialect: ResponsesDialect, call: DialectCall) -> None:
        self.dialect = dialect
        self.call = call
        self.seq = 0
        self.model = ""
        self.output: list[dict[str, Any]] = []
        self.open: dict[str, Any] | None = None
        """The reasoning or message item receiving deltas: its kind, id, index and text so far."""
        self.pending = ""
        """Whitespace before any text: no message item is opened for whitespace alone (as in a whole answer)."""
        self.finish: str | None = None

    def event(self, kind: str, **fields: Any) -> bytes:
        body = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return sse(body, event=kind)

    def response(self, status: str, **extra: Any) -> dict[str, Any]:
        return self.dialect._response(self.call, model=self.model, status=status, output=list(self.output), **extra)

    async def run(self, chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
        try:
            async for chunk in chunks:
                for event in self.feed(chunk):
                    yield event
        except GatewayError as exc:
            # The turn failed after output began (already recorded in the session): say so as OpenAI does.
            yield self.event("error", code=exc.code, message=str(exc), param=None)
            error = {"code": _failure_code(exc), "message": str(exc)}
            yield self.event("response.failed", response=self.response("failed", error=error))

    def feed(self, chunk: dict[str, Any]) -> list[bytes]:
        out: list[bytes] = []
        if not self.model:
            self.model = chunk["model"]
            out.append(self.event("response.created", response=self.response("in_progress")))
            out.append(self.event("response.in_progress", response=self.response("in_progress")))
        if not chunk["choices"]:  # the last chunk: usage
            out += self.close()
            status = "incomplete" if self.finish == "length" else "completed"
            final = self.response(status, usage=chunk.get("usage"))
            self.dialect._keep(self.call, final["output"])
            out.append(self.event(f"response.{status}", response=final))
            return out
        choice = chunk["choices"][0]
        delta = choice["delta"]
        if delta.get("reasoning_content"):
            out += self.text("reasoning", delta["reasoning_content"])
        if delta.get("content"):
            out += self.text("message", delta["content"])
        for call in delta.get("tool_calls") or []:
            out += self.close()
            out += self.function_call(call)
        if choice.get("finish_reason"):
            self.finish = choice["finish_reason"]
        return out

    def text(self, kind: str, piece: str) -> list[bytes]:
        out: list[bytes] = []
        if kind == "message" and (self.open is None or self.open["kind"] != "message"):
            if not (self.pending + piece).strip():
                self.pending += piece
                return out
            piece, self.pending = self.pending + piece, ""
        if self.open is None or self.open["kind"] != kind:
            out += self.close()
            out += self.start(kind)
        item = self.open
        assert item is not None
        item["text"] += piece
        where = {"item_id": item["id"], "output_index": item["index"], "content_index": 0}
        if kind == "reasoning":
            out.append(self.event("response.reasoning_text.delta", **where, delta=piece))
        else:
            out.append(self.event("response.output_text.delta", **where, delta=piece, logprobs=[]))
        return out

    def start(self, kind: str) -> list[bytes]:
        index = len(self.output)
        if kind == "reasoning":
            item_id = _new_id("rs")
            added = _reasoning_item(item_id, "", "in_progress")
            added["content"] = []
            part: dict[str, Any] = {"type": "reasoning_text", "text": ""}
        else:
            item_id = _new_id("msg")
            added = {"id": item_id, "type": "message", "role": "assistant", "status": "in_progress", "content": []}
            part = _text_part("")
        self.open = {"kind": kind, "id": item_id, "index": index, "text": ""}
        self.output.append(added)  # a placeholder until the item is done
        return [
            self.event("response.output_item.added", output_index=index, item=added),
            self.event("response.content_part.added", item_id=item_id, output_index=index, content_index=0, part=part),
        ]

    def close(self) -> list[bytes]:
        item, self.open = self.open, None
        if item is None:
            return []
        where = {"item_id": item["id"], "output_index": item["index"], "content_index": 0}
        text = item["text"]
        if item["kind"] == "reasoning":
            done = _reasoning_item(item["id"], text, "completed")
            events = [self.event("response.reasoning_text.done", **where, text=text),
                      self.event("response.content_part.done", **where, part={"type": "reasoning_text", "text": text})]
        else:
            done = _message_item(item["id"], text, "incomplete" if self.finish == "length" else "completed")
            events = [self.event("response.output_text.done", **where, text=text, logprobs=[]),
                      self.event("response.content_part.done", **where, part=_text_part(text))]
        self.output[item["index"]] = done
        events.append(self.event("response.output_item.done", output_index=item["index"], item=done))
        return events

    def function_call(self, call: dict[str, Any]) -> list[bytes]:
        index = len(self.output)
        item_id = _new_id("fc")
        done = _call_item(item_id, call)
        self.output.append(done)
        where = {"item_id": item_id, "output_index": index}
        return [
            self.event("response.output_item.added", output_index=index,
                       item={**done, "status": "in_progress", "arguments": ""}),
            self.event("response.function_call_arguments.delta", **where, delta=done["arguments"]),
            self.event("response.function_call_arguments.done", **where, name=done["name"],
                       arguments=done["arguments"]),
            self.event("response.output_item.done", output_index=index, item=done),
        ]


RESPONSES = ResponsesDialect()

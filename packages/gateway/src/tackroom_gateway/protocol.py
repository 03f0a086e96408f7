"""The OpenAI chat-completions request the gateway accepts, and how it maps onto an engine call."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from tackroom_gateway.errors import BadRequestError

# Sampling and constraint fields forwarded to the engine's /v1/completions unchanged.
PASSTHROUGH = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "seed",
    "stop",
    "logit_bias",
    "min_tokens",
    "ignore_eos",
    "bad_words",
    "allowed_token_ids",
    "include_stop_str_in_output",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "response_format",
    "structured_outputs",
    "repetition_detection",
    "thinking_token_budget",
    "priority",
    "vllm_xargs",
    "cache_salt",
)


def body_json(raw: bytes, error: Callable[[str], Exception] = BadRequestError) -> Any:
    """A request body's JSON, for every dialect; a body that is not JSON raises ``error`` saying so."""
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise error(f"request body is not JSON: {exc}") from exc


def problems(exc: ValidationError) -> str:
    """What a request model refused, one ``field.path: message`` per problem."""
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())


class ChatCompletionRequest(BaseModel):
    """``POST /v1/chat/completions`` body (OpenAI's, plus vLLM's extensions the engine understands)."""

    model_config = ConfigDict(extra="allow")

    messages: list[dict[str, Any]]
    model: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    n: int = 1
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    stop_token_ids: list[int] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    return_token_ids: bool | None = None

    @classmethod
    def parse(cls, raw: bytes) -> ChatCompletionRequest:
        data = body_json(raw)
        try:
            req = cls.model_validate(data)
        except ValidationError as exc:
            raise BadRequestError(f"invalid chat completion request: {problems(exc)}") from exc
        if not req.messages:
            raise BadRequestError("messages must not be empty")
        if req.n != 1:
            raise BadRequestError("n must be 1: the gateway records one trajectory per session; send n requests instead")
        for i, m in enumerate(req.messages):
            _check_message(i, m)
        return req

    @property
    def parse_tools(self) -> bool:
        return bool(self.tools) and self.tool_choice != "none"

    def forced_tool(self) -> str | None | bool:
        """``True`` for ``required``, a name for a named choice, ``None`` otherwise."""
        choice = self.tool_choice
        if choice == "required":
            return True
        if isinstance(choice, dict):
            name = (choice.get("function") or {}).get("name")
            if not name:
                raise BadRequestError("tool_choice object needs function.name")
            return name
        if choice not in (None, "auto", "none"):
            raise BadRequestError(f"tool_choice {choice!r}: use 'auto', 'none', 'required' or a named function")
        return None


def _check_message(i: int, m: Any) -> None:
    """The shapes the gateway reads: a role, text or content parts, tool calls as a list of objects."""
    if not isinstance(m, dict) or not isinstance(m.get("role"), str):
        raise BadRequestError(f"messages[{i}] has no role")
    content = m.get("content")
    if content is not None and not isinstance(content, (str, list)):
        raise BadRequestError(f"messages[{i}].content must be a string, a list of content parts or null")
    calls = m.get("tool_calls")
    if calls is None:
        return
    if not isinstance(calls, list):
        raise BadRequestError(f"messages[{i}].tool_calls must be a list")
    for k, call in enumerate(calls):
        fn = call.get("function", call) if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise BadRequestError(f"messages[{i}].tool_calls[{k}] must be an object with function.name")


def forced_tool_call_tag(tools: list[dict[str, Any]], name: str | None) -> dict[str, Any]:
    """A structural tag (xgrammar, via vLLM's ``structured_outputs``) that makes the model write exactly one
    Hermes-format call ``<tool_call>\\n{"name": NAME, "arguments": ARGS}\\n</tool_call>`` to one of ``tools``
    (or to ``name``), with ``ARGS`` constrained to that tool's JSON schema.

    The constraint keeps the model's own output format, so the recorded tokens are
    what the chat template would render for that call.
    """
    options = []
    for tool in tools:
        fn = tool.get("function") or {}
        if name is not None and fn.get("name") != name:
            continue
        params = fn.get("parameters") or {"type": "object"}
        options.append(
            {
                "type": "sequence",
                "elements": [
                    {
                        "type": "const_string",
                        "value": '<tool_call>\n{"name": ' + json.dumps(fn.get("name"), ensure_ascii=False) + ', "arguments": ',
                    },
                    {"type": "json_schema", "json_schema": params, "max_whitespace_cnt": 1},
                    {"type": "const_string", "value": "}\n</tool_call>"},
                ],
            }
        )
    if not options:
        known = ", ".join(str((t.get("function") or {}).get("name")) for t in tools) or "none"
        raise BadRequestError(f"tool_choice names {name!r}, which is not among the request's tools ({known})")
    fmt = options[0] if len(options) == 1 else {"type": "or", "elements": options}
    return {"type": "structural_tag", "format": fmt}

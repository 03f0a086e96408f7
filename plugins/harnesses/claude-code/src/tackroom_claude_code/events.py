"""``claude -p --output-format stream-json --verbose`` events → chat messages, behaviour metrics and how the run ended.

One JSON object per line, each with a ``type``:

* ``system`` / ``init``: the session starts (``session_id``, ``tools``, ``model``, ``claude_code_version``);
  ``system`` / ``api_retry``: a model call failed and is retried (``error_status``, ``attempt``);
* ``assistant``: one content block of a model reply (``message.content``: ``text``, ``thinking`` or
  ``tool_use``); a reply with several blocks comes as several events sharing ``message.id``. An error Claude Code
  shows the user comes as an assistant message of model ``<synthetic>``: not a model call;
* ``user``: the results of the reply's tool calls (``tool_result`` blocks, ``tool_use_id``, ``is_error``);
* ``result``: the run's end (``subtype`` ``success`` or ``error_max_turns`` …, ``is_error``, ``terminal_reason``
  such as ``completed``, ``max_turns``, ``prompt_too_long``, ``api_error``; ``api_error_status``; ``result``, the
  final text; ``usage``, the run's token totals).

Events of a sub-agent carry ``parent_tool_use_id``; the harness gives Claude Code no sub-agent tool, and any that
slip through are left out of the main conversation (their turns are not the conversation the tokens belong to).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from pydantic import BaseModel, Field

CODE_TOOLS = frozenset({"Bash"})
"""Tools whose calls run code (the ``code_call_share`` metric)."""

SYNTHETIC_MODEL = "<synthetic>"
"""The ``model`` of an assistant message Claude Code wrote itself (an error shown to the user), not the policy."""


class ToolCall(BaseModel):
    """One ``tool_use`` block and, once it came, its ``tool_result``."""

    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)
    result: str | None = None
    """``None``: no result was recorded (Claude Code stopped before the tool returned)."""
    is_error: bool = False


class Step(BaseModel):
    """One model call: the reply's blocks as Claude Code reported them."""

    message_id: str | None = None
    text: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    input_tokens: int | None = None
    """Prompt tokens of this call as the endpoint reported them (uncached + cache reads + cache writes)."""


class RunResult(BaseModel):
    """The ``result`` event: how Claude Code says the run ended."""

    subtype: str = "unknown"
    is_error: bool = False
    terminal_reason: str | None = None
    stop_reason: str | None = None
    text: str | None = None
    api_error_status: int | None = None
    errors: list[str] = Field(default_factory=list)
    num_turns: int | None = None
    output_tokens: int | None = None

    @property
    def max_turns(self) -> bool:
        return self.subtype == "error_max_turns" or self.terminal_reason == "max_turns"

    @property
    def context_exhausted(self) -> bool:
        return self.terminal_reason == "prompt_too_long"

    @property
    def message(self) -> str:
        """What Claude Code said about the failure, in one line."""
        parts = [self.text or "", *self.errors]
        said = " ".join(p.strip() for p in parts if p and p.strip())
        return said or f"{self.subtype} ({self.terminal_reason or 'no reason given'})"


class Episode(BaseModel):
    """What a Claude Code run did, rebuilt from its events."""

    steps: list[Step] = Field(default_factory=list)
    result: RunResult | None = None
    session_id: str | None = None
    version: str | None = None
    tools: list[str] = Field(default_factory=list)
    """The tools Claude Code offered the model (its ``init`` event)."""
    api_retries: int = 0
    last_api_error: str | None = None
    notices: list[str] = Field(default_factory=list)
    """Texts of Claude Code's own (``<synthetic>``) assistant messages: errors it showed instead of a reply."""
    unparsed_lines: int = 0
    subagent_events: int = 0

    @property
    def final_answer(self) -> str | None:
        if self.result is not None and not self.result.is_error and self.result.text and self.result.text.strip():
            return self.result.text.strip()
        for step in reversed(self.steps):
            if step.text.strip():
                return step.text.strip()
        return None

    def messages(self, instruction: str) -> list[dict[str, Any]]:
        """OpenAI-style transcript: the user's instruction, then each model call and its tool results, in order."""
        out: list[dict[str, Any]] = [{"role": "user", "content": instruction}]
        for step in self.steps:
            msg: dict[str, Any] = {"role": "assistant", "content": step.text or None}
            if step.reasoning:
                msg["reasoning_content"] = step.reasoning
            if step.tool_calls:
                msg["tool_calls"] = [
                    {"id": c.id, "type": "function",
                     "function": {"name": c.name, "arguments": json.dumps(c.input, ensure_ascii=False)}}
                    for c in step.tool_calls
                ]
            out.append(msg)
            for c in step.tool_calls:
                out.append({"role": "tool", "tool_call_id": c.id, "name": c.name, "content": c.result or "",
                            "is_error": c.is_error or c.result is None})
        return out

    def metrics(self) -> dict[str, float]:
        """Turns, tool calls (in all, by tool, failed), the share that ran code, tokens, retried calls."""
        calls = [c for s in self.steps for c in s.tool_calls]
        by_tool = Counter(c.name for c in calls)
        out: dict[str, float] = {
            "turns": float(len(self.steps)),
            "tool_calls": float(len(calls)),
            "tool_errors": float(sum(1 for c in calls if c.is_error or c.result is None)),
            "code_call_share": sum(by_tool[t] for t in CODE_TOOLS) / len(calls) if calls else 0.0,
            "api_retries": float(self.api_retries),
        }
        for name, n in sorted(by_tool.items()):
            out[f"tool_calls.{name}"] = float(n)
        if self.result is not None and self.result.output_tokens is not None and self.steps:
            out["output_tokens_per_turn"] = self.result.output_tokens / len(self.steps)
        inputs = [s.input_tokens for s in self.steps if s.input_tokens is not None]
        if inputs:
            out["input_tokens_last_turn"] = float(inputs[-1])
        return out


def _text(content: Any) -> str:
    """A tool result's content: a string, or a list of blocks (text kept, others named)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
            elif isinstance(block, dict):
                parts.append(f"[{block.get('type', 'block')}]")
        return "\n".join(parts)
    return "" if content is None else json.dumps(content, ensure_ascii=False)


def _input_tokens(usage: dict[str, Any]) -> int | None:
    counts = [usage.get(k) for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")]
    counts = [c for c in counts if isinstance(c, int)]
    return sum(counts) if counts else None


def _result(event: dict[str, Any]) -> RunResult:
    usage = event.get("usage") or {}
    errors = event.get("errors") or []
    status = event.get("api_error_status")
    return RunResult(
        subtype=str(event.get("subtype") or "unknown"),
        is_error=bool(event.get("is_error")),
        terminal_reason=event.get("terminal_reason"),
        stop_reason=event.get("stop_reason"),
        text=event.get("result") if isinstance(event.get("result"), str) else None,
        api_error_status=status if isinstance(status, int) else None,
        errors=[str(e) for e in errors] if isinstance(errors, list) else [str(errors)],
        num_turns=event.get("num_turns") if isinstance(event.get("num_turns"), int) else None,
        output_tokens=usage.get("output_tokens") if isinstance(usage.get("output_tokens"), int) else None,
    )


def parse_events(text: str) -> Episode:
    """Rebuild the episode from the event stream (robust to a cut-off last line and unknown event types).

    Blocks of one reply (same ``message.id``, no tool results in between) make one step; tool results are matched
    to their call by id, wherever it is.
    """
    episode = Episode()
    open_step: Step | None = None
    calls: dict[str, ToolCall] = {}

    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError:
            episode.unparsed_lines += 1
            continue
        if not isinstance(event, dict):
            episode.unparsed_lines += 1
            continue
        kind = event.get("type")
        episode.session_id = episode.session_id or event.get("session_id")
        if kind in ("assistant", "user") and event.get("parent_tool_use_id"):
            episode.subagent_events += 1
            continue
        if kind == "system":
            subtype = event.get("subtype")
            if subtype == "init":
                episode.version = event.get("claude_code_version")
                episode.tools = [str(t) for t in event.get("tools") or []]
            elif subtype == "api_retry":
                episode.api_retries += 1
                episode.last_api_error = f"HTTP {event.get('error_status')} ({event.get('error')})"
        elif kind == "assistant":
            message = event.get("message") or {}
            blocks = message.get("content") or []
            if message.get("model") == SYNTHETIC_MODEL:
                episode.notices.append(_text(blocks))
                open_step = None
                continue
            message_id = message.get("id")
            if open_step is None or message_id is None or open_step.message_id != message_id:
                open_step = Step(message_id=message_id, input_tokens=_input_tokens(message.get("usage") or {}))
                episode.steps.append(open_step)
            for block in blocks if isinstance(blocks, list) else []:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "text":
                    open_step.text += str(block.get("text", ""))
                elif block.get("type") == "thinking":
                    open_step.reasoning += str(block.get("thinking", ""))
                elif block.get("type") == "tool_use":
                    call = ToolCall(id=str(block.get("id", "")), name=str(block.get("name", "?")),
                                    input=block.get("input") if isinstance(block.get("input"), dict) else {})
                    open_step.tool_calls.append(call)
                    calls[call.id] = call
        elif kind == "user":
            open_step = None  # the reply is over once its tool results are back
            content = (event.get("message") or {}).get("content")
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    call = calls.get(str(block.get("tool_use_id", "")))
                    if call is not None:
                        call.result = _text(block.get("content"))
                        call.is_error = bool(block.get("is_error"))
        elif kind == "result":
            episode.result = _result(event)
    return episode

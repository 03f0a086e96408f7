"""``opencode run --format json`` events → chat messages, behaviour metrics and how the episode ended.

One JSON object per line, each with a ``type`` and (mostly) a ``part``:

* ``step_start``: a model call begins (one step = one assistant turn);
* ``text`` / ``reasoning``: the turn's text (``part.text``);
* ``tool_use``: a finished tool call (``part.tool``, ``part.callID``,
  ``part.state`` with ``status`` ``completed``/``error``, ``input``, ``output``
  or ``error``; bash adds ``metadata.exit``);
* ``step_finish``: the turn ended (``part.reason``: ``stop``, ``tool-calls``,
  ``length`` …; ``part.tokens``: input/output counts the provider reported);
* ``error``: the session failed (``error.name``, ``error.data.message``).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from pydantic import BaseModel, Field

CODE_TOOLS = frozenset({"bash"})
"""Tools whose calls run code (the ``code_call_share`` metric)."""


class OpenCodeFailure(BaseModel):
    """An ``error`` event: OpenCode gave up on the session."""

    name: str
    message: str
    status_code: int | None = None
    retryable: bool | None = None

    @property
    def context_exhausted(self) -> bool:
        return self.name == "ContextOverflowError" or "context_length_exceeded" in self.message


class Step(BaseModel):
    """One assistant turn as OpenCode reported it."""

    text: str = ""
    reasoning: str = ""
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    finish_reason: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None


class Episode(BaseModel):
    """What an OpenCode run did, rebuilt from its events."""

    steps: list[Step] = Field(default_factory=list)
    failure: OpenCodeFailure | None = None
    unparsed_lines: int = 0
    session_id: str | None = None

    @property
    def final_answer(self) -> str | None:
        for step in reversed(self.steps):
            if step.text.strip():
                return step.text.strip()
        return None

    def messages(self, instruction: str) -> list[dict[str, Any]]:
        """OpenAI-style transcript: the user's instruction, then each turn and its tool results."""
        out: list[dict[str, Any]] = [{"role": "user", "content": instruction}]
        for step in self.steps:
            msg: dict[str, Any] = {"role": "assistant", "content": step.text or None}
            if step.reasoning:
                msg["reasoning_content"] = step.reasoning
            if step.tool_calls:
                msg["tool_calls"] = [
                    {"id": c["id"], "type": "function",
                     "function": {"name": c["name"], "arguments": json.dumps(c["input"], ensure_ascii=False)}}
                    for c in step.tool_calls
                ]
            out.append(msg)
            for c in step.tool_calls:
                out.append({"role": "tool", "tool_call_id": c["id"], "name": c["name"], "content": c["result"],
                            "is_error": c["status"] != "completed"})
        return out

    def metrics(self) -> dict[str, float]:
        """Turns, tool calls (in all, by tool, failed), the share that ran code, tokens per turn."""
        calls = [c for s in self.steps for c in s.tool_calls]
        by_tool = Counter(c["name"] for c in calls)
        out: dict[str, float] = {
            "turns": float(len(self.steps)),
            "tool_calls": float(len(calls)),
            "tool_errors": float(sum(1 for c in calls if c["status"] != "completed")),
            "code_call_share": sum(by_tool[t] for t in CODE_TOOLS) / len(calls) if calls else 0.0,
        }
        for name, n in sorted(by_tool.items()):
            out[f"tool_calls.{name}"] = float(n)
        outputs = [s.output_tokens for s in self.steps if s.output_tokens is not None]
        if outputs:
            out["output_tokens_per_turn"] = sum(outputs) / len(outputs)
        inputs = [s.input_tokens for s in self.steps if s.input_tokens is not None]
        if inputs:
            out["input_tokens_last_turn"] = float(inputs[-1])
        return out


def _tool_call(part: dict[str, Any]) -> dict[str, Any]:
    state = part.get("state") or {}
    status = state.get("status", "unknown")
    result = state.get("output") if status == "completed" else state.get("error")
    meta = state.get("metadata") or {}
    return {
        "id": part.get("callID") or part.get("id") or "",
        "name": part.get("tool", "?"),
        "input": state.get("input") or {},
        "status": status,
        "result": "" if result is None else str(result),
        "exit_code": meta.get("exit"),
    }


def parse_events(text: str) -> Episode:
    """Rebuild the episode from the event stream (robust to a cut-off last line and unknown event types)."""
    episode = Episode()
    step: Step | None = None

    def current() -> Step:
        nonlocal step
        if step is None:
            step = Step()
            episode.steps.append(step)
        return step

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
        episode.session_id = episode.session_id or event.get("sessionID")
        kind = event.get("type")
        part = event.get("part") or {}
        if kind == "step_start":
            step = None
            current()
        elif kind == "text":
            current().text += part.get("text", "")
        elif kind == "reasoning":
            current().reasoning += part.get("text", "")
        elif kind == "tool_use":
            current().tool_calls.append(_tool_call(part))
        elif kind == "step_finish":
            s = current()
            s.finish_reason = part.get("reason")
            tokens = part.get("tokens") or {}
            s.input_tokens = tokens.get("input")
            s.output_tokens = tokens.get("output")
            step = None
        elif kind == "error":
            err = event.get("error") or {}
            data = err.get("data") or {}
            episode.failure = OpenCodeFailure(
                name=str(err.get("name", "UnknownError")),
                message=str(data.get("message") or err.get("message") or json.dumps(err)[:2000]),
                status_code=data.get("statusCode"),
                retryable=data.get("isRetryable"),
            )
    return episode

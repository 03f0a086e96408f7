"""``codex exec --json`` events → chat messages, behaviour metrics and how the episode ended.

One JSON object per line (codex-rs ``exec/src/exec_events.rs``):

* ``thread.started`` (``thread_id``), ``turn.started``;
* ``item.started`` / ``item.updated`` / ``item.completed`` with an ``item``: ``reasoning`` and ``agent_message``
  (``text``), ``command_execution`` (``command``, ``aggregated_output``, ``exit_code``, ``status``),
  ``file_change`` (``changes``), ``mcp_tool_call`` (``server``, ``tool``, ``arguments``, ``result``/``error``),
  ``web_search``, ``todo_list``, and ``error`` (a warning Codex went on after);
* ``turn.completed`` (``usage``: the turn's input/output tokens), ``turn.failed`` (``error.message``), and a bare
  ``error`` (``message``) when the stream to the model broke.

Codex does not mark where one model call ends and the next begins. One model reply is, in order, its reasoning, its
text and its tool calls; Codex runs the calls and sends the results in the next call. So a step (one assistant
message) ends where an item could not belong to the same reply: reasoning or text after a tool call or after text,
or a tool call after a tool call. Parallel calls in one reply (Codex asks for them; a small model rarely makes
them) read as one step each.
"""

from __future__ import annotations

import json
import shlex
from collections import Counter
from typing import Any

from pydantic import BaseModel, Field

SHELL_TOOL = "exec_command"
"""The function Codex's model calls to run a command (unified exec)."""
CODE_TOOLS = frozenset({SHELL_TOOL})
"""Tools whose calls run code (the ``code_call_share`` metric)."""
_TOOL_ITEMS = frozenset({"command_execution", "file_change", "mcp_tool_call", "web_search"})
_CONTEXT_MARKERS = ("context window", "context_length_exceeded", "maximum context length", "context length")


class CodexFailure(BaseModel):
    """Why Codex gave up on the turn (``turn.failed`` or a bare ``error``)."""

    message: str

    @property
    def context_exhausted(self) -> bool:
        text = self.message.lower()
        return any(marker in text for marker in _CONTEXT_MARKERS)

    @property
    def status_code(self) -> int | None:
        """The HTTP status Codex quotes (``unexpected status 400 Bad Request: ...``), if any."""
        marker = "status "
        at = self.message.find(marker)
        if at < 0:
            return None
        digits = self.message[at + len(marker): at + len(marker) + 3]
        return int(digits) if digits.isdigit() else None


class ToolCall(BaseModel):
    """One tool call of a step and what came back."""

    id: str
    name: str
    arguments: dict[str, Any]
    result: str = ""
    status: str = "in_progress"
    """completed, failed, declined, or in_progress (Codex was stopped before it finished)."""
    exit_code: int | None = None

    @property
    def is_error(self) -> bool:
        return self.status != "completed" or (self.exit_code not in (None, 0))


class Step(BaseModel):
    """One assistant turn (one model call) as Codex reported it."""

    text: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)


class Episode(BaseModel):
    """What a Codex run did, rebuilt from its events."""

    steps: list[Step] = Field(default_factory=list)
    failure: CodexFailure | None = None
    warnings: list[str] = Field(default_factory=list)
    thread_id: str | None = None
    turn_completed: bool = False
    input_tokens: int | None = None
    output_tokens: int | None = None
    unparsed_lines: int = 0

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
                    {"id": c.id, "type": "function",
                     "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}}
                    for c in step.tool_calls
                ]
            out.append(msg)
            for c in step.tool_calls:
                out.append({"role": "tool", "tool_call_id": c.id, "name": c.name, "content": c.result,
                            "is_error": c.is_error})
        return out

    def metrics(self) -> dict[str, float]:
        """Turns, tool calls (in all, by tool, failed), the share that ran code, tokens (Codex's own count)."""
        calls = [c for s in self.steps for c in s.tool_calls]
        by_tool = Counter(c.name for c in calls)
        out: dict[str, float] = {
            "turns": float(len(self.steps)),
            "tool_calls": float(len(calls)),
            "tool_errors": float(sum(1 for c in calls if c.is_error)),
            "code_call_share": sum(by_tool[t] for t in CODE_TOOLS) / len(calls) if calls else 0.0,
        }
        for name, n in sorted(by_tool.items()):
            out[f"tool_calls.{name}"] = float(n)
        if self.output_tokens is not None and self.steps:
            out["output_tokens_per_turn"] = self.output_tokens / len(self.steps)
        if self.input_tokens is not None:
            out["input_tokens_total"] = float(self.input_tokens)
        return out


def shell_command(command: Any) -> str:
    """The command line the model asked for: Codex reports it wrapped (``/bin/bash -c '...'``)."""
    if isinstance(command, list):
        argv = [str(a) for a in command]
    else:
        try:
            argv = shlex.split(str(command))
        except ValueError:
            return str(command)
    if len(argv) == 3 and argv[0].rsplit("/", 1)[-1] in ("bash", "sh", "zsh") and argv[1] in ("-c", "-lc"):
        return argv[2]
    return shlex.join(argv) if isinstance(command, list) else str(command)


def _tool_call(item: dict[str, Any]) -> ToolCall:
    kind = item.get("type")
    status = str(item.get("status") or "in_progress")
    call_id = str(item.get("id") or "")
    if kind == "command_execution":
        code = item.get("exit_code")
        return ToolCall(id=call_id, name=SHELL_TOOL, arguments={"cmd": shell_command(item.get("command", ""))},
                        result=str(item.get("aggregated_output") or ""), status=status,
                        exit_code=code if isinstance(code, int) else None)
    if kind == "mcp_tool_call":
        error = item.get("error")
        result = item.get("result")
        text = (error.get("message") if isinstance(error, dict) else str(error)) if error else _mcp_text(result)
        args = item.get("arguments")
        return ToolCall(id=call_id, name=f"mcp__{item.get('server', '?')}__{item.get('tool', '?')}",
                        arguments=args if isinstance(args, dict) else {"arguments": args}, result=text,
                        status=status)
    if kind == "file_change":
        changes = item.get("changes") or []
        summary = "\n".join(f"{c.get('kind', '?')} {c.get('path', '?')}" for c in changes if isinstance(c, dict))
        return ToolCall(id=call_id, name="apply_patch", arguments={"changes": changes}, result=summary, status=status)
    return ToolCall(id=call_id, name=str(kind), arguments={"query": item.get("query")}, status=status)


def _mcp_text(result: Any) -> str:
    if not isinstance(result, dict):
        return "" if result is None else json.dumps(result, ensure_ascii=False)
    parts = [c.get("text", "") for c in result.get("content") or [] if isinstance(c, dict) and c.get("type") == "text"]
    return "\n".join(parts) if parts else json.dumps(result, ensure_ascii=False)


class _Builder:
    """Groups items into steps (see the module docstring)."""

    def __init__(self, episode: Episode) -> None:
        self.episode = episode
        self.step: Step | None = None
        self.calls: dict[str, ToolCall] = {}

    def _new(self) -> Step:
        self.step = Step()
        self.episode.steps.append(self.step)
        return self.step

    def thought(self, text: str) -> None:
        step = self.step
        if step is None or step.tool_calls or step.text:
            step = self._new()
        step.reasoning = f"{step.reasoning}\n\n{text}" if step.reasoning else text

    def said(self, text: str) -> None:
        step = self.step
        if step is None or step.tool_calls or step.text:
            step = self._new()
        step.text = text

    def called(self, item: dict[str, Any]) -> None:
        call = _tool_call(item)
        known = self.calls.get(call.id)
        if known is not None:  # started earlier: the completed item carries the result
            known.result, known.status, known.exit_code = call.result, call.status, call.exit_code
            return
        step = self.step
        if step is None or step.tool_calls:
            step = self._new()
        step.tool_calls.append(call)
        if call.id:
            self.calls[call.id] = call


def parse_events(text: str) -> Episode:
    """Rebuild the episode from the event stream (robust to a cut-off last line and unknown event types)."""
    episode = Episode()
    builder = _Builder(episode)
    stream_errors: list[str] = []
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
        item = event.get("item") if isinstance(event.get("item"), dict) else {}
        item_type = item.get("type")
        if kind == "thread.started":
            episode.thread_id = event.get("thread_id")
        elif kind == "item.started" and item_type in _TOOL_ITEMS:
            builder.called(item)
        elif kind == "item.completed":
            if item_type == "reasoning":
                builder.thought(str(item.get("text") or ""))
            elif item_type == "agent_message":
                builder.said(str(item.get("text") or ""))
            elif item_type in _TOOL_ITEMS:
                builder.called(item)
            elif item_type == "error":
                episode.warnings.append(str(item.get("message") or ""))
        elif kind == "turn.completed":
            episode.turn_completed = True
            usage = event.get("usage") or {}
            episode.input_tokens = usage.get("input_tokens")
            episode.output_tokens = usage.get("output_tokens")
        elif kind == "turn.failed":
            error = event.get("error") or {}
            episode.failure = CodexFailure(message=str(error.get("message") or json.dumps(error)[:2000]))
        elif kind == "error":
            stream_errors.append(str(event.get("message") or ""))
    if episode.failure is None and stream_errors and not episode.turn_completed:
        episode.failure = CodexFailure(message=stream_errors[-1])
    else:  # Codex reconnected after them (it reports each retry as an `error`)
        episode.warnings.extend(stream_errors)
    return episode

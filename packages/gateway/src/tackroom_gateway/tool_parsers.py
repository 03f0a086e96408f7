"""Turning model text into OpenAI ``tool_calls`` (and reasoning), whole or streamed.

Formats:

* ``hermes``: ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` (SmolLM2 with
  tackroom's template, Hermes/NousResearch models, Qwen2.5/Qwen3).
* ``qwen3``: Qwen3's output: an optional leading ``<think>...</think>`` block (returned as
  ``reasoning_content``) and ``<tool_call>`` blocks whose body is either Hermes JSON
  or Qwen3-Coder's XML (``<function=NAME><parameter=KEY>VALUE</parameter></function>``).

A block that does not parse stays in ``content`` verbatim (and is counted), so the
harness sees what the model wrote rather than a silently dropped call.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from pydantic import BaseModel, Field

TOOL_OPEN = "<tool_call>"
TOOL_CLOSE = "</tool_call>"
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"

_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_XML_FUNCTION = re.compile(r"<function=([^>\n]+)>(.*?)(?:</function>|\Z)", re.DOTALL)
_XML_PARAM = re.compile(r"<parameter=([^>\n]+)>(.*?)(?:</parameter>|(?=<parameter=)|\Z)", re.DOTALL)


class ToolCall(BaseModel):
    """One parsed call, in OpenAI's shape (``arguments`` is a JSON string)."""

    id: str = Field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")
    name: str
    arguments: str

    def openai(self, index: int | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}
        if index is not None:
            out["index"] = index
        return out


class ParsedOutput(BaseModel):
    """Model text split into what the client sees."""

    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    parse_failures: int = 0


def _json_call(body: str) -> ToolCall | None:
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            json.loads(args)
        except ValueError:
            return None
        return ToolCall(name=obj["name"], arguments=args)
    return ToolCall(name=obj["name"], arguments=json.dumps(args, ensure_ascii=False))


def _xml_value(raw: str) -> Any:
    raw = raw.strip("\n")
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _xml_call(body: str) -> ToolCall | None:
    fn = _XML_FUNCTION.search(body)
    if fn is None:
        return None
    args = {m.group(1).strip(): _xml_value(m.group(2)) for m in _XML_PARAM.finditer(fn.group(2))}
    return ToolCall(name=fn.group(1).strip(), arguments=json.dumps(args, ensure_ascii=False))


class ToolParser:
    """Hermes ``<tool_call>`` JSON. Subclasses add formats; :meth:`stream` gives the incremental form."""

    name = "hermes"
    reasoning = False

    def parse_body(self, body: str) -> ToolCall | None:
        return _json_call(body.strip())

    def split_reasoning(self, text: str) -> tuple[str | None, str]:
        if not self.reasoning:
            return None, text
        stripped = text.lstrip()
        if stripped.startswith(THINK_OPEN):
            stripped = stripped[len(THINK_OPEN) :]
        elif THINK_CLOSE not in text:
            return None, text
        if THINK_CLOSE not in stripped:  # cut off while thinking
            return stripped.strip("\n"), ""
        reasoning, _, rest = stripped.partition(THINK_CLOSE)
        return reasoning.strip("\n"), rest.lstrip("\n")

    def parse(self, text: str, *, parse_tools: bool = True) -> ParsedOutput:
        reasoning, text = self.split_reasoning(text)
        if not parse_tools or TOOL_OPEN not in text:
            return ParsedOutput(content=text or None, reasoning=reasoning)
        calls: list[ToolCall] = []
        kept: list[str] = []
        failures = 0
        pos = 0
        for m in _BLOCK.finditer(text):
            kept.append(text[pos : m.start()])
            call = self.parse_body(m.group(1))
            if call is None:
                failures += 1
                kept.append(m.group(0))
            else:
                calls.append(call)
            pos = m.end()
        kept.append(text[pos:])
        content = "".join(kept).strip() if calls else "".join(kept)
        return ParsedOutput(content=content or None, reasoning=reasoning, tool_calls=calls, parse_failures=failures)

    def stream(self, *, parse_tools: bool = True) -> StreamingToolParser:
        return StreamingToolParser(self, parse_tools=parse_tools)


class Qwen3ToolParser(ToolParser):
    """Qwen3: leading ``<think>`` reasoning, then Hermes JSON or Qwen3-Coder XML tool calls."""

    name = "qwen3"
    reasoning = True

    def parse_body(self, body: str) -> ToolCall | None:
        body = body.strip()
        if body.startswith("<function="):
            return _xml_call(body)
        return _json_call(body)


PARSERS: dict[str, type[ToolParser]] = {"hermes": ToolParser, "qwen3": Qwen3ToolParser}


def get_tool_parser(name: str) -> ToolParser:
    from tackroom import ConfigError

    try:
        return PARSERS[name]()
    except KeyError:
        raise ConfigError(f"unknown tool parser {name!r}; choose one of {', '.join(sorted(PARSERS))}") from None


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``marker``."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


class StreamDelta(BaseModel):
    """What one streamed piece adds for the client."""

    content: str = ""
    reasoning: str = ""


class StreamingToolParser:
    """Feeds model text as it streams; emits content/reasoning at once, holds tool calls to the end.

    Text that might be the start of ``<tool_call>`` or ``</think>`` is held back until
    it is known not to be. Everything from the first ``<tool_call>`` on is buffered and
    parsed by :meth:`finish`, which returns the same :class:`ParsedOutput` as
    ``parser.parse(full_text)``.
    """

    def __init__(self, parser: ToolParser, *, parse_tools: bool = True) -> None:
        self.parser = parser
        self.parse_tools = parse_tools
        self.text = ""
        self._emitted = 0  # chars of self.text already decided (emitted or buffered)
        self._state = "start" if parser.reasoning else "content"
        self._in_tools = False
        self._sent_content = ""
        self._sent_reasoning = ""

    def feed(self, piece: str) -> StreamDelta:
        self.text += piece
        out = StreamDelta()
        while True:
            pending = self.text[self._emitted :]
            if self._state == "start":
                stripped = pending.lstrip()
                if not stripped:
                    return out
                if stripped.startswith(THINK_OPEN):
                    self._emitted += len(pending) - len(stripped) + len(THINK_OPEN)
                    self._state = "reasoning_start"
                    continue
                if THINK_OPEN.startswith(stripped):
                    return out
                self._state = "content"
                continue
            if self._state in ("reasoning", "reasoning_start"):
                if self._state == "reasoning_start":
                    trimmed = pending.lstrip("\n")
                    if not trimmed:
                        return out
                    self._emitted += len(pending) - len(trimmed)
                    self._state = "reasoning"
                    continue
                end = pending.find(THINK_CLOSE)
                if end >= 0:
                    out.reasoning += pending[:end].rstrip("\n")
                    self._emitted += end + len(THINK_CLOSE)
                    self._state = "content_start"
                    continue
                # hold a possible start of </think> and the newlines before it (stripped at the end)
                keep = len(pending) - _partial_suffix(pending, THINK_CLOSE)
                keep = len(pending[:keep].rstrip("\n"))
                out.reasoning += pending[:keep]
                self._emitted += keep
                return self._track(out)
            if self._state == "content_start":
                trimmed = pending.lstrip("\n")
                if not trimmed:
                    return self._track(out)
                self._emitted += len(pending) - len(trimmed)
                self._state = "content"
                continue
            if self._state == "content":
                if not self.parse_tools:
                    out.content += pending
                    self._emitted += len(pending)
                    return self._track(out)
                at = pending.find(TOOL_OPEN)
                if at >= 0:
                    out.content += pending[:at]
                    self._emitted += at
                    self._state = "tools"
                    return self._track(out)
                hold = _partial_suffix(pending, TOOL_OPEN)
                out.content += pending[: len(pending) - hold]
                self._emitted += len(pending) - hold
                return self._track(out)
            return self._track(out)  # "tools": buffered until finish()

    def _track(self, out: StreamDelta) -> StreamDelta:
        self._sent_content += out.content
        self._sent_reasoning += out.reasoning
        return out

    def finish(self) -> tuple[StreamDelta, ParsedOutput]:
        """Parse the whole text; return what is still owed to the client and the final parse.

        Content already streamed is never taken back: when the final parse places text
        differently (a tool block that failed to parse), the rest is sent as is.
        """
        final = self.parser.parse(self.text, parse_tools=self.parse_tools)
        owed = StreamDelta()
        want_content = final.content or ""
        if want_content.startswith(self._sent_content):
            owed.content = want_content[len(self._sent_content) :]
        elif not final.tool_calls:
            owed.content = self.text[self._emitted :]
        want_reasoning = final.reasoning or ""
        if want_reasoning.startswith(self._sent_reasoning):
            owed.reasoning = want_reasoning[len(self._sent_reasoning) :]
        if final.tool_calls and self._sent_content and not want_content.startswith(self._sent_content):
            # streamed text before the first call was stripped in the final parse; keep what was sent
            final = final.model_copy(update={"content": self._sent_content.strip() or None})
        return self._track(owed), final

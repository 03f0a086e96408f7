"""A trial's files shaped for reading: the conversation with its tool calls and results, the token ids with the
loss mask and logprobs, the grading, timings and errors.

Everything here is data for the templates, which escape every string (a trajectory is the agent's own text: it
may hold ``<script>``); nothing here builds HTML. Files are read as found: any field may be missing or of the
wrong type in a file from another tackroom version, and that shows as absent, never as an error page.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tackroom_viewer.token_text import Decoder

MAX_TOKENS_SHOWN = 20_000
"""Tokens drawn per sequence; past that the page says how many were left out."""
MESSAGE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name", "is_error")


def pretty(value: Any) -> str:
    """JSON for reading (a string stays itself)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _text(content: Any) -> str:
    """A message's content as text: a string, or an OpenAI content-part list's text parts (others as JSON)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
            else:
                parts.append(pretty(part))
        return "\n".join(parts)
    return pretty(content)


@dataclass
class ToolCallView:
    id: str
    name: str
    arguments: str
    """Pretty JSON when the arguments parse, else the raw text the model wrote."""


@dataclass
class MessageView:
    index: int
    role: str
    text: str
    tool_calls: list[ToolCallView] = field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    is_error: bool | None = None
    other: dict[str, str] = field(default_factory=dict)
    """Keys this view does not lay out (reasoning, a harness's own fields), as JSON text."""


def _tool_call(raw: Any) -> ToolCallView:
    if not isinstance(raw, dict):
        return ToolCallView("", "?", pretty(raw))
    function = raw.get("function") if isinstance(raw.get("function"), dict) else {}
    args = function.get("arguments", raw.get("arguments"))
    if isinstance(args, str):
        try:
            args = pretty(json.loads(args))
        except ValueError:
            pass
    return ToolCallView(str(raw.get("id") or ""), str(function.get("name") or raw.get("name") or "?"),
                        args if isinstance(args, str) else pretty(args))


def conversation(trajectory: dict[str, Any] | None) -> list[MessageView]:
    messages = (trajectory or {}).get("messages")
    out = []
    for i, m in enumerate(messages if isinstance(messages, list) else []):
        if not isinstance(m, dict):
            out.append(MessageView(i, "?", pretty(m)))
            continue
        calls = m.get("tool_calls")
        out.append(MessageView(
            index=i, role=str(m.get("role") or "?"), text=_text(m.get("content")),
            tool_calls=[_tool_call(c) for c in calls] if isinstance(calls, list) else [],
            tool_call_id=str(m["tool_call_id"]) if m.get("tool_call_id") is not None else None,
            name=str(m["name"]) if m.get("name") is not None else None,
            is_error=m.get("is_error") if isinstance(m.get("is_error"), bool) else None,
            other={k: pretty(v) for k, v in m.items() if k not in MESSAGE_KEYS}))
    return out


@dataclass
class Token:
    id: Any
    trained: bool | None
    """The loss mask's value (None where the trajectory has no mask for this token)."""
    logprob: float | None
    text: str | None = None
    """The id's own text, where the run's tokenizer could be loaded."""


@dataclass
class TurnView:
    index: int
    branch: Any
    finish_reason: Any
    prompt_tokens: int
    completion: list[Token]
    prompt_text: str | None = None
    """The prompt ids decoded: the conversation exactly as the model saw it (chat template included)."""
    completion_text: str | None = None


@dataclass
class TokenView:
    sequence: list[Token]
    sequence_total: int
    trained: int
    turns: list[TurnView]
    tokenizer: str | None = None
    problem: str | None = None
    """Why the ids are not decoded (no tokenizer named, none loadable here)."""

    @property
    def left_out(self) -> int:
        return self.sequence_total - len(self.sequence)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _logprob(values: list[Any], i: int) -> float | None:
    v = values[i] if i < len(values) else None
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def tokens(trajectory: dict[str, Any] | None, decoder: Decoder | None = None) -> TokenView | None:
    """The flattened sequence (ids, loss mask, logprobs) and each engine call's prompt and completion, decoded
    where the run's tokenizer loads; None when the harness recorded no tokens."""
    t = trajectory or {}
    decoder = decoder or Decoder(None)
    ids, mask, logprobs = _list(t.get("token_ids")), _list(t.get("loss_mask")), _list(t.get("logprobs"))
    turns = [u for u in _list(t.get("turns")) if isinstance(u, dict)]
    if not ids and not turns:
        return None
    shown = ids[:MAX_TOKENS_SHOWN]
    sequence = [Token(i, bool(mask[n]) if n < len(mask) else None, _logprob(logprobs, n), piece)
                for n, (i, piece) in enumerate(zip(shown, decoder.pieces(shown)))]
    views = []
    for n, u in enumerate(turns):
        prompt, completion, lps = _list(u.get("prompt_ids")), _list(u.get("completion_ids")), _list(u.get("logprobs"))
        drawn = completion[:MAX_TOKENS_SHOWN]
        views.append(TurnView(n, u.get("branch", 0), u.get("finish_reason"), len(prompt),
                              [Token(c, True, _logprob(lps, i), piece)
                               for i, (c, piece) in enumerate(zip(drawn, decoder.pieces(drawn)))],
                              decoder.text(prompt), decoder.text(completion)))
    return TokenView(sequence, len(ids), sum(1 for m in mask if m), views, decoder.name, decoder.problem)


@dataclass
class TrialPage:
    """Everything one trial's page (or one side of a comparison) shows."""

    key: str
    result: dict[str, Any] | None
    trajectory: dict[str, Any] | None
    messages: list[MessageView]
    tokens: TokenView | None

    @property
    def title(self) -> str:
        r = self.result or {}
        return str(r.get("trial_id") or self.key.rsplit("/", 1)[-1])

    @property
    def errors(self) -> list[dict[str, Any]]:
        r = self.result or {}
        first = [r["error"]] if isinstance(r.get("error"), dict) else []
        return first + [e for e in _list(r.get("other_errors")) if isinstance(e, dict)]

    @property
    def notes(self) -> list[str]:
        r, t = self.result or {}, self.trajectory or {}
        return [str(n) for n in _list(r.get("notes")) + [n for n in _list(t.get("notes")) if n not in _list(r.get("notes"))]]

    def mapping(self, name: str, source: str = "result") -> dict[str, Any]:
        data = (self.result if source == "result" else self.trajectory) or {}
        value = data.get(name)
        return value if isinstance(value, dict) else {}

    @property
    def previous_attempts(self) -> list[dict[str, Any]]:
        return [a for a in _list((self.result or {}).get("previous_attempts")) if isinstance(a, dict)]


def trial_page(key: str, result: dict[str, Any] | None, trajectory: dict[str, Any] | None,
               decoder: Decoder | None = None) -> TrialPage:
    return TrialPage(key, result, trajectory, conversation(trajectory), tokens(trajectory, decoder))

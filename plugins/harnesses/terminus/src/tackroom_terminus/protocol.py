"""The JSON the model answers with each turn, how a reply is parsed, and the schema that enforces it.

A turn is ``{"analysis": str, "plan": str, "commands": [{"keystrokes": str,
"duration": float}], "task_complete": bool}``. Parsing is forgiving where the
intent is unambiguous (a fenced block, text around the object, a string
``"true"``, a missing duration) and says so in ``warnings``; it is strict where
guessing would act on the model's behalf (no object, wrong types, missing
``commands``), which gives ``errors`` the model is shown before it is asked again.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, Field

DEFAULT_DURATION = 1.0
_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)


class Command(BaseModel):
    """Keystrokes to type into the terminal and how long to wait afterwards."""

    keystrokes: str
    duration: float = DEFAULT_DURATION


class TurnReply(BaseModel):
    """One valid model turn."""

    analysis: str = ""
    plan: str = ""
    commands: list[Command] = Field(default_factory=list)
    task_complete: bool = False


class ParseResult(BaseModel):
    """What :func:`parse_reply` made of a reply: the turn (when usable), its errors and warnings."""

    reply: TurnReply | None = None
    errors: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.reply is not None and not self.errors


def _find_object(text: str) -> tuple[Any, str, list[str]]:
    """The first JSON object in ``text``: (value or None, what went wrong, warnings)."""
    warnings: list[str] = []
    body = text.strip()
    fenced = _FENCE.search(body)
    if fenced and "{" in fenced.group(1):
        body = fenced.group(1).strip()
    start = body.find("{")
    if start < 0:
        return None, "no JSON object found: the answer must be one JSON object starting with '{'", warnings
    decoder = json.JSONDecoder()
    try:
        value, end = decoder.raw_decode(body, start)
    except json.JSONDecodeError as exc:
        # Maybe the object closes at the last brace (text after it that raw_decode tripped over).
        last = body.rfind("}")
        try:
            value = json.loads(body[start : last + 1]) if last > start else None
            end = last + 1
        except json.JSONDecodeError:
            value = None
        if value is None:
            line = body[:exc.pos].count("\n") + 1
            return None, f"invalid JSON ({exc.msg} at line {line}); check quotes, commas and escaped newlines (\\n)", warnings
    if body[:start].strip():
        warnings.append("text before the JSON object was ignored; answer with the JSON object only")
    if body[end:].strip():
        warnings.append("text after the JSON object was ignored; answer with the JSON object only")
    return value, "", warnings


def _as_bool(value: Any, errors: list[str], warnings: list[str]) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        warnings.append('task_complete should be a JSON boolean (true/false), not a string')
        return value.strip().lower() == "true"
    errors.append(f"task_complete must be true or false, got {json.dumps(value)[:40]}")
    return False


def parse_reply(text: str, *, max_duration: float) -> ParseResult:
    """Parse a model reply into a :class:`TurnReply`; durations are capped at ``max_duration``."""
    value, problem, warnings = _find_object(text)
    if problem:
        return ParseResult(errors=[problem], warnings=warnings)
    if not isinstance(value, dict):
        return ParseResult(errors=[f"the answer must be a JSON object, got {type(value).__name__}"], warnings=warnings)
    errors: list[str] = []
    for field in ("analysis", "plan"):
        if field not in value:
            warnings.append(f"missing field {field!r}")
        elif not isinstance(value[field], str):
            warnings.append(f"{field!r} should be a string")
    complete = _as_bool(value.get("task_complete", False), errors, warnings)
    raw_commands = value.get("commands")
    if raw_commands is None:
        if not complete:
            errors.append("missing field 'commands' (a list; use [] to wait without typing)")
        raw_commands = []
    if not isinstance(raw_commands, list):
        errors.append(f"'commands' must be a list of objects, got {type(raw_commands).__name__}")
        raw_commands = []
    commands: list[Command] = []
    for i, raw in enumerate(raw_commands):
        where = f"commands[{i}]"
        if not isinstance(raw, dict):
            errors.append(f"{where} must be an object with 'keystrokes' and 'duration'")
            continue
        keys = raw.get("keystrokes")
        if not isinstance(keys, str):
            errors.append(f"{where}.keystrokes must be a string")
            continue
        duration = raw.get("duration", None)
        if duration is None:
            warnings.append(f"{where} has no duration; waited {DEFAULT_DURATION:g}s")
            duration = DEFAULT_DURATION
        elif isinstance(duration, bool) or not isinstance(duration, int | float):
            errors.append(f"{where}.duration must be a number of seconds")
            continue
        if duration < 0:
            warnings.append(f"{where}.duration is negative; waited 0s")
            duration = 0.0
        if duration > max_duration:
            warnings.append(f"{where}.duration {duration:g}s is above the {max_duration:g}s cap; waited {max_duration:g}s")
            duration = max_duration
        extra = sorted(set(raw) - {"keystrokes", "duration"})
        if extra:
            warnings.append(f"{where}: unknown fields {extra} were ignored")
        commands.append(Command(keystrokes=keys, duration=float(duration)))
    if errors:
        return ParseResult(errors=errors, warnings=warnings)
    reply = TurnReply(
        analysis=value["analysis"] if isinstance(value.get("analysis"), str) else "",
        plan=value["plan"] if isinstance(value.get("plan"), str) else "",
        commands=commands,
        task_complete=complete,
    )
    return ParseResult(reply=reply, warnings=warnings)


def reply_schema(*, max_duration: float, max_chars: int | None = None, max_commands: int | None = None) -> dict[str, Any]:
    """The JSON schema of a turn, for ``response_format`` (the engine then only samples valid turns).

    ``max_chars``/``max_commands`` bound strings and the command list so a small
    model cannot run past its per-turn token limit inside a string.
    """

    def text() -> dict[str, Any]:
        return {"type": "string", **({"maxLength": max_chars} if max_chars else {})}

    commands: dict[str, Any] = {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "keystrokes": text(),
                "duration": {"type": "number", "minimum": 0, "maximum": max_duration},
            },
            "required": ["keystrokes", "duration"],
            "additionalProperties": False,
        },
    }
    if max_commands:
        commands["maxItems"] = max_commands
    return {
        "type": "object",
        "properties": {"analysis": text(), "plan": text(), "commands": commands, "task_complete": {"type": "boolean"}},
        "required": ["analysis", "plan", "commands", "task_complete"],
        "additionalProperties": False,
    }


def response_format(schema: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's ``response_format`` for a strict JSON schema (vLLM enforces it with its grammar backend)."""
    return {"type": "json_schema", "json_schema": {"name": "terminus_turn", "schema": schema, "strict": True}}

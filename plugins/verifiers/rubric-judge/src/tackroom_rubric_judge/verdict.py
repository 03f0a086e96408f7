"""The judge's answer for one criterion, its JSON schema, and a tolerant parser."""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class Verdict(BaseModel):
    """``{"rationale": "...", "passed": true}``: the judge's reasoning first, then its decision."""

    model_config = ConfigDict(extra="ignore")

    rationale: str = Field(description="One to three sentences of evidence for the decision")
    passed: bool = Field(description="Whether the criterion holds for the agent's work")


VERDICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "rationale": {"type": "string", "maxLength": 400},
        "passed": {"type": "boolean"},
    },
    "required": ["rationale", "passed"],
    "additionalProperties": False,
}


def response_format(kind: str) -> dict[str, Any] | None:
    """The ``response_format`` request field for ``json_schema`` / ``json_object`` / ``none``."""
    if kind == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": "verdict", "strict": True, "schema": VERDICT_SCHEMA}}
    if kind == "json_object":
        return {"type": "json_object"}
    return None


class InvalidVerdict(ValueError):
    """The reply is not a verdict object; the message says what is wrong, for the re-ask."""


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def parse_verdict(text: str) -> Verdict:
    """Parse a reply: a JSON object, possibly inside a ```json fence or surrounded by prose."""
    candidates = [text.strip()]
    candidates += [m.strip() for m in _FENCE.findall(text)]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start:end + 1])
    problem = "no JSON object found"
    for candidate in candidates:
        try:
            data = json.loads(candidate)
        except json.JSONDecodeError as exc:
            problem = f"not valid JSON ({exc.msg} at char {exc.pos})"
            continue
        if not isinstance(data, dict):
            problem = f"a JSON {type(data).__name__}, not an object"
            continue
        try:
            return Verdict.model_validate(data)
        except ValidationError as exc:
            problem = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'object'}: {e['msg']}" for e in exc.errors())
    raise InvalidVerdict(problem)

"""The policy's sampling settings, added to each Responses request Codex sends.

Codex sends no ``temperature``, ``top_p`` or ``max_output_tokens`` and has no config key for them (its provider
table has headers and query parameters, no body fields). Without them every call would sample at the engine's
defaults and could write until the context is full. So the relay in front of the policy fills them in
(``ModelRelay(fill=...)``), on ``POST .../responses`` only, and only where the request does not set them itself.
"""

from __future__ import annotations

from typing import Any

from tackroom_agent_kit import BodyFill, call_dialect, missing_from

RESPONSES_FIELDS = {"temperature": "temperature", "top_p": "top_p", "max_tokens": "max_output_tokens",
                    "max_completion_tokens": "max_output_tokens", "max_output_tokens": "max_output_tokens"}
"""Policy sampling keys (chat names) → their Responses names; other keys have no Responses field."""


def responses_sampling(sampling: dict[str, Any], max_output_tokens: int) -> dict[str, Any]:
    """The Responses fields for a policy's ``sampling`` (``max_output_tokens`` when it sets none)."""
    out: dict[str, Any] = {}
    for key, value in sampling.items():
        field = RESPONSES_FIELDS.get(key)
        if field is not None and value is not None:
            out[field] = value
    out.setdefault("max_output_tokens", max_output_tokens)
    return out


def fill_responses(defaults: dict[str, Any]) -> BodyFill:
    """The relay's fill for Codex: ``defaults`` into each ``POST .../responses`` body that lacks them."""
    return lambda path, doc: missing_from(doc, defaults) if call_dialect(path) == "responses" else doc

"""The policy's sampling settings, added to each Gemini request the CLI sends.

The Gemini CLI sets its own generation settings and none of the policy's (temperature, top_p, an output limit);
without an output limit a small model writes until its context is full, minutes per call on a CPU engine. The relay
in front of the policy (``ModelRelay(fill=...)``) puts them into ``generationConfig`` where the request does not set
them itself, on ``generateContent`` / ``streamGenerateContent`` calls only.
"""

from __future__ import annotations

from typing import Any

from tackroom_agent_kit import BodyFill, call_dialect, missing_from

GENERATION_FIELDS = {"temperature": "temperature", "top_p": "topP", "top_k": "topK", "max_tokens": "maxOutputTokens",
                     "max_completion_tokens": "maxOutputTokens", "stop": "stopSequences", "seed": "seed"}
"""Policy sampling keys (chat names) → their ``generationConfig`` names; other keys have no Gemini field."""


def generation_config(sampling: dict[str, Any], max_output_tokens: int) -> dict[str, Any]:
    """The ``generationConfig`` fields for a policy's ``sampling`` (``maxOutputTokens`` when it sets none)."""
    out = {GENERATION_FIELDS[k]: v for k, v in sampling.items() if k in GENERATION_FIELDS and v is not None}
    if isinstance(out.get("stopSequences"), str):
        out["stopSequences"] = [out["stopSequences"]]
    out.setdefault("maxOutputTokens", max_output_tokens)
    return out


def fill_generation(defaults: dict[str, Any]) -> BodyFill:
    """The relay's fill: ``defaults`` into the ``generationConfig`` of each generate call that lacks them."""

    def fill(path: str, doc: dict[str, Any]) -> dict[str, Any]:
        if call_dialect(path) != "gemini":
            return doc
        config = doc.get("generationConfig")
        return {**doc, "generationConfig": missing_from(config if isinstance(config, dict) else {}, defaults)}

    return fill

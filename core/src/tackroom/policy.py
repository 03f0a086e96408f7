"""The handle a harness uses to reach the model."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Policy(BaseModel):
    """An OpenAI-compatible endpoint plus what it can do.

    ``base_url`` ends in ``/v1``. When ``token_ids`` is true the endpoint is a
    vLLM-style engine (or the policy gateway) that accepts prompt token ids on
    ``/completions`` and returns completion ids and logprobs, so a harness with
    its own loop can keep exact token accounting. ``tokenizer`` is a local path
    or hub id of the tokenizer that matches the engine.
    """

    model_config = ConfigDict(extra="forbid")

    base_url: str
    model: str
    api_key: str = "EMPTY"
    token_ids: bool = False
    tokenizer: str | None = None
    sampling: dict[str, Any] = Field(default_factory=dict)
    """Default sampling parameters (temperature, top_p, max_tokens …) sent on every call."""
    label: str | None = None
    """A short name for reports (``tackroom matrix`` rows); defaults to ``model``."""

    @property
    def display_name(self) -> str:
        return self.label or self.model

"""What a harness returns: the conversation and, where known, its exact tokens (TITO)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, model_validator


class TokenTurn(BaseModel):
    """One engine call: the exact prompt ids sent and the completion ids it produced."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float] | None = None
    finish_reason: str | None = None
    branch: int = 0
    """Index of the history branch this turn belongs to; a new branch starts when a client rewrote
    earlier messages, so its prompt no longer extends the last turn."""
    policy_version: int | None = None
    """The trained policy's version the turn started under (its first token's), where known."""
    token_versions: list[int] | None = None
    """The version each completion token was sampled under, aligned with ``completion_ids``; set where a turn was
    cut at a weight update and continued on the new weights (a partial rollout). None: every token is
    ``policy_version``'s."""
    logprobs_constrained: bool = False
    """Sampled under a grammar (structured outputs): ``logprobs`` are the grammar-renormalised distribution's, not
    the model's own (a forced token reads 0.0); a trainer cannot reproduce them."""

    @model_validator(mode="after")
    def _aligned(self) -> TokenTurn:
        if self.logprobs is not None and len(self.logprobs) != len(self.completion_ids):
            raise ValueError(
                f"logprobs has {len(self.logprobs)} entries for {len(self.completion_ids)} completion ids"
            )
        if self.token_versions is not None and len(self.token_versions) != len(self.completion_ids):
            raise ValueError(f"token_versions has {len(self.token_versions)} entries for "
                             f"{len(self.completion_ids)} completion ids")
        return self

    @property
    def oldest_version(self) -> int | None:
        """The oldest policy version any of its tokens was sampled under (None: not known)."""
        return min(self.token_versions) if self.token_versions else self.policy_version


class Trajectory(BaseModel):
    """A harness's episode.

    ``messages`` is the OpenAI-style chat transcript (for reading and judging). ``turns`` holds the
    exact token ids per engine call when the harness or the policy gateway recorded them;
    ``token_ids``/``loss_mask``/``logprobs`` are the flattened sequence the trainer consumes
    (loss_mask is 1 only on tokens the model generated). ``stop_reason`` says why the episode ended
    (``completed``, ``max_turns``, ``context_exhausted``, ``timeout`` …).
    """

    messages: list[dict[str, Any]] = Field(default_factory=list)
    turns: list[TokenTurn] = Field(default_factory=list)
    token_ids: list[int] = Field(default_factory=list)
    loss_mask: list[int] = Field(default_factory=list)
    logprobs: list[float] | None = None
    final_answer: str | None = None
    stop_reason: str = "completed"
    metrics: dict[str, float] = Field(default_factory=dict)
    """Behaviour metrics (turns, tool calls, tool-call successes, …) the harness measured."""
    notes: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _aligned(self) -> Trajectory:
        n = len(self.token_ids)
        if len(self.loss_mask) != n:
            raise ValueError(f"loss_mask has {len(self.loss_mask)} entries for {n} token ids")
        if self.logprobs is not None and len(self.logprobs) != n:
            raise ValueError(f"logprobs has {len(self.logprobs)} entries for {n} token ids")
        return self

    @property
    def has_tokens(self) -> bool:
        return bool(self.token_ids)

"""The part of Harbor's Agent Trajectory Interchange Format (ATIF, v1.8) that tackroom writes and reads.

Written from the format's specification (Harbor's RFC 0001 and its documented models), as pydantic models that
forbid unknown keys, like the specification does, so a document we write is checked before it is written.
Multimodal content parts (images, audio) are read as text parts' lists and kept in ``extra``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SCHEMA_VERSION = "ATIF-v1.8"
READABLE_VERSIONS = tuple(f"ATIF-v1.{n}" for n in range(9))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AtifAgent(_Strict):
    name: str
    version: str
    model_name: str | None = None
    tool_definitions: list[dict[str, Any]] | None = None
    extra: dict[str, Any] | None = None


class AtifToolCall(_Strict):
    tool_call_id: str
    function_name: str
    arguments: dict[str, Any]
    extra: dict[str, Any] | None = None


class AtifContentPart(_Strict):
    type: Literal["text", "image", "audio"]
    text: str | None = None
    source: dict[str, Any] | None = None


class AtifObservationResult(_Strict):
    source_call_id: str | None = None
    content: str | list[AtifContentPart] | None = None
    subagent_trajectory_ref: list[dict[str, Any]] | None = None


class AtifObservation(_Strict):
    results: list[AtifObservationResult]


class AtifMetrics(_Strict):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    extra: dict[str, Any] | None = None


class AtifStep(_Strict):
    step_id: int = Field(ge=1)
    timestamp: str | None = None
    source: Literal["system", "user", "agent"]
    model_name: str | None = None
    reasoning_effort: str | float | None = None
    message: str | list[AtifContentPart]
    reasoning_content: str | None = None
    tool_calls: list[AtifToolCall] | None = None
    observation: AtifObservation | None = None
    metrics: AtifMetrics | None = None
    is_copied_context: bool | None = None
    llm_call_count: int | None = Field(default=None, ge=0)
    extra: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _agent_only(self) -> AtifStep:
        if self.source != "agent":
            for name in ("model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics"):
                if getattr(self, name) is not None:
                    raise ValueError(f"step {self.step_id}: {name} is only for agent steps (source is {self.source!r})")
        return self


class AtifFinalMetrics(_Strict):
    total_prompt_tokens: int | None = None
    total_completion_tokens: int | None = None
    total_cached_tokens: int | None = None
    total_cost_usd: float | None = None
    total_steps: int | None = Field(default=None, ge=0)
    extra: dict[str, Any] | None = None


class AtifTrajectory(_Strict):
    schema_version: Literal[READABLE_VERSIONS] = SCHEMA_VERSION  # type: ignore[valid-type]
    session_id: str | None = None
    trajectory_id: str | None = None
    agent: AtifAgent
    steps: list[AtifStep] = Field(min_length=1)
    notes: str | None = None
    final_metrics: AtifFinalMetrics | None = None
    continued_trajectory_ref: str | None = None
    extra: dict[str, Any] | None = None
    subagent_trajectories: list[AtifTrajectory] | None = None

    @model_validator(mode="after")
    def _references(self) -> AtifTrajectory:
        for i, step in enumerate(self.steps, start=1):
            if step.step_id != i:
                raise ValueError(f"steps[{i - 1}].step_id is {step.step_id}: step ids run 1, 2, 3, …")
            calls = {c.tool_call_id for c in step.tool_calls or []}
            for result in (step.observation.results if step.observation else []):
                if result.source_call_id is not None and result.source_call_id not in calls:
                    raise ValueError(f"step {i}: an observation answers tool call {result.source_call_id!r}, "
                                     "which is not among this step's tool_calls")
        return self

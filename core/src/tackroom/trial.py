"""A trial (task × harness × sandbox × verifier × policy × pass) and its result."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field

from tackroom.errors import ErrorClass
from tackroom.reward import Reward

PHASES = ("sandbox_start", "verifier_prepare", "harness_setup", "harness_run", "verify", "teardown")


def slug(text: str) -> str:
    """A path- and label-safe version of ``text``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "x"


class Trial(BaseModel):
    """What to run. ``id`` is stable across re-runs, which is what makes a run resumable."""

    task_id: str
    task_path: str
    harness: str
    """Harness label (its name, or a config label when one harness appears with several option sets)."""
    sandbox: str
    verifier: str
    model: str | None = None
    pass_index: int = 0

    @property
    def id(self) -> str:
        parts = [self.task_id, self.harness]
        if self.model:
            parts.append(self.model)
        parts.append(f"p{self.pass_index}")
        return "__".join(slug(p) for p in parts)


class TrialErrorInfo(BaseModel):
    """A classified failure."""

    error_class: ErrorClass = Field(alias="class")
    type: str
    message: str
    phase: str

    model_config = {"populate_by_name": True}


class AttemptRecord(BaseModel):
    attempt: int
    error: TrialErrorInfo | None
    timings: dict[str, float]


class TrialResult(BaseModel):
    """What happened. Written to ``<run>/<trial-id>/result.json``."""

    trial_id: str
    task: str
    harness: str
    sandbox: str
    verifier: str
    model: str | None = None
    pass_index: int = 0
    attempt: int = 1
    reward: float | None = None
    """The verifier's score; 0.0 for ``model`` errors that left nothing to grade; None for infra/task errors."""
    components: dict[str, float] = Field(default_factory=dict)
    reward_details: dict[str, Any] = Field(default_factory=dict)
    error: TrialErrorInfo | None = None
    timings: dict[str, float] = Field(default_factory=dict)
    """Seconds per phase (``sandbox_start``, ``harness_setup``, ``harness_run``, ``verify``, ``teardown``, ``total``)."""
    metrics: dict[str, float] = Field(default_factory=dict)
    """Behaviour metrics from the trajectory (turns, tool calls, …)."""
    stop_reason: str | None = None
    domain: str | None = None
    category: str | None = None
    notes: list[str] = Field(default_factory=list)
    previous_attempts: list[AttemptRecord] = Field(default_factory=list)
    started_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat())
    finished_at: str | None = None

    @property
    def error_class(self) -> ErrorClass | None:
        return self.error.error_class if self.error else None

    @property
    def counted(self) -> bool:
        """Does this trial count in scores? (``infra``/``task`` failures do not.)"""
        return self.error is None or self.error.error_class == "model"

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

"""A trial (task × harness × sandbox × verifier × policy × pass) and its result."""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, model_validator

from tackroom._errors import ErrorClass
from tackroom._policy import redact


def slug(text: str) -> str:
    """A path- and label-safe version of ``text`` (not one-to-one: ``a b`` and ``a-b`` share one; see :func:`label_part`)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "x"


SLUG_CHARS = 40
"""Longest readable part of a trial id (the id names a folder: it must stay well under 255 bytes)."""
TASK_HASH_CHARS = 10


def label_part(text: str, limit: int = SLUG_CHARS) -> str:
    """``text`` as an id part: itself when already a short safe name, else its slug plus a short hash of the original
    (``a b`` → ``a-b-<hash>``, ``ünï`` → ``n-<hash>``), so names that slug alike stay apart (a forged collision is
    refused where trials are planned: two trials with one id)."""
    s = slug(text)
    if s == text and len(s) <= limit and s not in (".", ".."):
        return s
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:6]
    return f"{s[:limit].rstrip('-.') or 'x'}-{digest}"


class Trial(BaseModel):
    """What to run. ``id``, ``<task>-<task hash>__<harness>[__<model>]__p<pass>``, is stable across re-runs (what
    makes a run resumable); the hash of the task's path and content (:func:`tackroom._task.task_source_hash`)
    keeps tasks that slug alike, same-named tasks of two datasets and an edited task from sharing an id."""

    task_id: str
    task_path: str
    harness: str
    """Harness label (its name, or a config label when one harness appears with several option sets)."""
    sandbox: str
    verifier: str
    model: str | None = None
    pass_index: int = 0
    task_hash: str | None = None
    """Hash of the task's source path and content; computed from ``task_path`` when not given (pass
    ``Task.source_hash`` to skip reading the task again)."""

    @model_validator(mode="after")
    def _hash(self) -> Trial:
        if not self.task_hash:
            from tackroom._task import task_source_hash

            self.task_hash = task_source_hash(Path(self.task_path))
        return self

    @classmethod
    def for_task(cls, task: Any, **fields: Any) -> Trial:
        """A trial of a loaded :class:`~tackroom._task.Task` (its id, path and content hash filled in)."""
        return cls(task_id=task.id, task_path=str(task.path), task_hash=task.source_hash, **fields)

    @property
    def id(self) -> str:
        task = f"{slug(self.task_id)[:SLUG_CHARS].rstrip('-.') or 'x'}-{str(self.task_hash)[:TASK_HASH_CHARS]}"
        model = [label_part(self.model)] if self.model else []
        return "__".join([task, label_part(self.harness), *model, f"p{self.pass_index}"])


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
    other_errors: list[TrialErrorInfo] = Field(default_factory=list)
    """Failures that did not decide the class (precedence task > infra > model), e.g. the agent's
    timeout when grading then found the task broken."""
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
        """What ``result.json`` holds: credentials (URL userinfo, known keys echoed in messages) masked."""
        return redact(self.model_dump(mode="json", by_alias=True))

"""Which rollouts a training step may learn from (SkyRL issue #1613: a failed rollout never crashes a step).

Per group (the ``samples_per_prompt`` trials of one task):

- ``infra`` failures were already retried by the trial runtime up to
  ``[rollout] infra_attempts``; one still failing is masked;
- ``model`` failures (context exceeded, bad tool call, …) train, reward 0;
- a ``task`` failure anywhere masks the whole group (the task is broken);
- ``timeout_group_threshold`` (2) or more timed-out trials mask the group,
  fewer mask only the timed-out ones (the recipe's rule);
- a trial that left no token-level trajectory is masked (nothing to train on);
- with ``[rollout] apply_overlong_filtering`` (DAPO's overlong filtering, SkyRL's
  ``generator.apply_overlong_filtering``), a trial the model ended cut off at a token
  limit (its turn's ``max_tokens``, or the context) is masked: its grade says nothing
  about an answer it never finished, and rewarding it teaches the model not to stop.
  A masked trial's tokens get no gradient, so nothing in it (an agent that fakes a
  cut-off included) is reinforced.

A masked trial's loss mask is all zeros. A trial masked for a failure
(infra, timeout) gets the mean of the group's graded rewards, so it moves
neither the group's baseline nor its advantages; one masked only for lack
of tokens or for being cut off keeps its own grade (it is a real outcome).
A fully masked group gets reward 0 everywhere.
"""

from __future__ import annotations

from collections import Counter
from typing import Literal

from pydantic import BaseModel, Field

MaskReason = Literal["infra", "task", "timeout", "timeout_group", "no_tokens", "overlong"]
GRADED: tuple[MaskReason | None, ...] = (None, "no_tokens", "overlong")
"""Reasons a row keeps its own grade for: it is a real outcome, not a failure."""


class RowOutcome(BaseModel):
    """What one trial contributes to the step."""

    error_class: str | None = None
    timed_out: bool = False
    has_tokens: bool = True
    truncated: bool = False
    """The model was cut off at a token limit (its turn's ``max_tokens``, or the context) when the episode ended."""
    reward: float | None = None


class RowDecision(BaseModel):
    masked: bool
    reason: MaskReason | None = None
    reward: float


class GroupDecision(BaseModel):
    rows: list[RowDecision]
    counts: dict[str, int] = Field(default_factory=dict)


def decide_group(rows: list[RowOutcome], timeout_group_threshold: int = 2, *,
                 overlong_filtering: bool = False) -> GroupDecision:
    """Apply the masking rules to one group (``overlong_filtering``: mask the rows cut off at a token limit)."""
    counts: Counter[str] = Counter()
    timed_out = sum(r.timed_out for r in rows)
    group_reason: MaskReason | None = None
    if any(r.error_class == "task" for r in rows):
        group_reason = "task"
    elif timed_out >= timeout_group_threshold:
        group_reason = "timeout_group"
    if group_reason is not None:
        counts[f"masked_groups_{group_reason}"] += 1
        counts[f"masked_{group_reason}"] += len(rows)
        return GroupDecision(rows=[RowDecision(masked=True, reason=group_reason, reward=0.0) for _ in rows],
                             counts=dict(counts))
    reasons: list[MaskReason | None] = []
    for r in rows:
        reason: MaskReason | None = None
        if r.error_class == "infra":
            reason = "infra"
        elif r.timed_out:
            reason = "timeout"
        elif not r.has_tokens:
            reason = "no_tokens"
        elif overlong_filtering and r.truncated:
            reason = "overlong"
        reasons.append(reason)
        if reason:
            counts[f"masked_{reason}"] += 1
        if r.error_class == "model" and not r.timed_out:
            counts["model_errors"] += 1
    # Rows without tokens still graded (a model error before the first token) and rows cut off keep their reward.
    counted = [(r.reward or 0.0) for r, why in zip(rows, reasons) if why in GRADED]
    fill = sum(counted) / len(counted) if counted else 0.0
    decisions = [
        RowDecision(masked=why is not None, reason=why,
                    reward=(r.reward or 0.0) if why in GRADED else fill)
        for r, why in zip(rows, reasons)
    ]
    return GroupDecision(rows=decisions, counts=dict(counts))

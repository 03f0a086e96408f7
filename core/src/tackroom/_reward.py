"""What a verifier returns."""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, Field

from tackroom._errors import TaskError


class Reward(BaseModel):
    """A verifier's grade: ``score`` in [0, 1] (or the task's ``reward_range``), named ``components``, free
    ``details``; outside that range or not finite is a ``task`` error (:meth:`check_range`)."""

    score: float
    components: dict[str, float] = Field(default_factory=dict)
    details: dict[str, Any] = Field(default_factory=dict)

    def check_range(self, low: float = 0.0, high: float = 1.0, *, where: str = "the verifier") -> None:
        """Raise :class:`TaskError` unless ``score`` and every component are finite and within [low, high].

        A reward the trainer learns from must be bounded: one task scoring 1e308 (or -5) would swamp a
        batch's advantages. ``low``/``high`` come from the task's ``[verifier] reward_range`` (default [0, 1]).
        """
        named = {"score": self.score, **{f"components[{k!r}]": v for k, v in self.components.items()}}
        for name, value in named.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise TaskError(f"{where} returned {name} = {value!r}: not a finite number")
            if not low <= value <= high:
                raise TaskError(
                    f"{where} returned {name} = {value!r}, outside the task's reward range [{low:g}, {high:g}]; "
                    "fix the grader, or declare the range in task.toml: [verifier] reward_range = [low, high]"
                )

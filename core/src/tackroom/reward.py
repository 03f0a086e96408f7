"""What a verifier returns."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class Reward(BaseModel):
    """A verifier's grade: ``score`` in [0, 1] by convention, named ``components``, free ``details``."""

    score: float
    components: dict[str, float] = Field(default_factory=dict)
    details: dict[str, Any] = Field(default_factory=dict)

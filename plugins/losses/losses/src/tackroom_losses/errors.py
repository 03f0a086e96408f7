"""Errors a caller of the losses can hit. Each message says what to change."""

from __future__ import annotations

import tackroom


class LossConfigError(tackroom.ConfigError):
    """A loss was given options it cannot honour (unknown config type, an aggregation
    that needs grouping without groups, SkyRL off-policy correction it does not apply)."""


class LossInputError(tackroom.TackroomError, ValueError):
    """The tensors handed to a loss do not fit together (shapes, missing rollout logprobs)."""

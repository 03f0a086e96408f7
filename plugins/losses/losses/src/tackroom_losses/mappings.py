"""How each loss runs on a trainer backend: the ``LossSpec.mappings`` of this distribution.

Each is a function of the loss's validated options; ``tackroom train`` calls the one for its backend
(tackroom-train's README, "How a loss maps onto a backend", says what each backend expects). No torch here:
``tackroom plugins`` imports this module with the specs.
"""

from __future__ import annotations

from typing import Any

from tackroom_losses.options import LossOptions, PpoClipOptions


def skyrl_fields(options: LossOptions) -> dict[str, Any]:
    """SkyRL: the options as fields of its ``AlgorithmConfig`` (the options class's ``skyrl_fields``), which SkyRL
    hands the loss function as ``config`` and :meth:`LossOptions.from_config` reads back."""
    return {dotted: getattr(options, ours) for ours, dotted in type(options).skyrl_fields.items()}


def ppo_on_tinker(options: PpoClipOptions) -> tuple[str, dict[str, float]]:
    """Tinker: PPO-clip is Tinker's ``ppo`` with the same clip range."""
    return "ppo", {"clip_low_threshold": 1.0 - float(options.eps_clip_low),
                   "clip_high_threshold": 1.0 + float(options.eps_clip_high)}


def importance_sampling_on_tinker(options: LossOptions) -> tuple[str, None]:
    """Tinker: DPPO and GLM-5 as ``importance_sampling``. On that backend every step samples from the weights it
    then trains, so the ratio to the behaviour policy is 1 up to numerics: DPPO's trust-region mask and GLM-5's
    truncation act only away from 1, and what is left is the importance-sampling policy gradient."""
    return "importance_sampling", None

"""Importance ratios and the masked statistics every loss reports.

Pure tensor math (float32 whatever the input dtype), safe inside
``torch.compile``. Metrics stay 0-dim tensors: turning them into Python
numbers is the trainer's job, once per step, not a sync inside every call.
"""

from __future__ import annotations

import torch

LOG_RATIO_LIMIT = 20.0
"""Log-ratios are clamped to ±20 before ``exp`` so a stale token cannot overflow float32."""


def log_ratio(log_probs: torch.Tensor, behaviour_log_probs: torch.Tensor) -> torch.Tensor:
    """``log_probs - behaviour_log_probs`` in float32, unclamped."""
    return log_probs.float() - behaviour_log_probs.float()


def ratio_of(delta: torch.Tensor) -> torch.Tensor:
    """``exp`` of a log-ratio clamped to ±20."""
    return torch.exp(delta.clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT))


def ratio_moves(delta: torch.Tensor) -> torch.Tensor:
    """Where the clamped ratio still depends on ``log_probs`` (d ratio / d log_probs = ratio there, 0 elsewhere)."""
    return delta.abs() <= LOG_RATIO_LIMIT


def importance_ratio(log_probs: torch.Tensor, behaviour_log_probs: torch.Tensor) -> torch.Tensor:
    """``exp(log_probs - behaviour_log_probs)`` in float32, the log-ratio clamped to ±20."""
    return ratio_of(log_ratio(log_probs, behaviour_log_probs))


def row_sum(values: torch.Tensor) -> torch.Tensor:
    """Sum over tokens, ``[B, T] -> [B]``.

    Every big reduction in a loss kernel goes over the same (token) axis, so
    ``torch.compile`` fuses them all into one sweep over the inputs; the
    per-sequence results are then reduced again, which is cheap.
    """
    return values.sum(dim=-1)


def masked_fraction(flag: torch.Tensor, mask: torch.Tensor, total: torch.Tensor) -> torch.Tensor:
    """Mask-weighted fraction of tokens where ``flag`` holds; 0 when no token is valid."""
    return row_sum(flag.float() * mask).sum() / total.clamp(min=1.0)


def ratio_stats(ratio: torch.Tensor, mask: torch.Tensor, total: torch.Tensor) -> dict[str, torch.Tensor]:
    """Mean, min and max of the ratio over valid tokens; all 1.0 (on-policy) when none is valid."""
    valid = mask > 0
    some = total > 0
    one = torch.ones((), dtype=ratio.dtype, device=ratio.device)
    mean = row_sum(ratio * mask).sum() / total.clamp(min=1.0)
    low = torch.where(valid, ratio, float("inf")).amin(dim=-1).amin()
    high = torch.where(valid, ratio, float("-inf")).amax(dim=-1).amax()
    return {
        "ratio_mean": torch.where(some, mean, one),
        "ratio_min": torch.where(some, low, one),
        "ratio_max": torch.where(some, high, one),
    }

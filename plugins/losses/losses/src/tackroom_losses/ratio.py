"""Importance ratios and the masked statistics every loss reports.

Pure tensor math (float32 whatever the input dtype), safe inside
``torch.compile``. Metrics stay 0-dim tensors: turning them into Python
numbers is the trainer's job, once per step, not a sync inside every call.
"""

from __future__ import annotations

import torch

LOG_RATIO_LIMIT = 20.0
"""Log-ratios are clamped to ±20 before ``exp`` so a stale token cannot overflow float32."""


def importance_ratio(log_probs: torch.Tensor, behaviour_log_probs: torch.Tensor) -> torch.Tensor:
    """``exp(log_probs - behaviour_log_probs)`` in float32, the log-ratio clamped to ±20."""
    log_ratio = log_probs.float() - behaviour_log_probs.float()
    return torch.exp(log_ratio.clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT))


def masked_fraction(flag: torch.Tensor, mask: torch.Tensor, total: torch.Tensor) -> torch.Tensor:
    """Mask-weighted fraction of tokens where ``flag`` holds; 0 when no token is valid."""
    return (flag.float() * mask).sum() / total.clamp(min=1.0)


def ratio_stats(ratio: torch.Tensor, mask: torch.Tensor, total: torch.Tensor) -> dict[str, torch.Tensor]:
    """Mean, min and max of the ratio over valid tokens; all 1.0 (on-policy) when none is valid."""
    ratio = ratio.detach()
    valid = mask > 0
    some = total > 0
    one = torch.ones((), dtype=ratio.dtype, device=ratio.device)
    mean = (ratio * mask).sum() / total.clamp(min=1.0)
    low = torch.where(valid, ratio, torch.full_like(ratio, float("inf"))).amin()
    high = torch.where(valid, ratio, torch.full_like(ratio, float("-inf"))).amax()
    return {
        "ratio_mean": torch.where(some, mean, one),
        "ratio_min": torch.where(some, low, one),
        "ratio_max": torch.where(some, high, one),
    }

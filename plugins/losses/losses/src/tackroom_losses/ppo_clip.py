"""``ppo_clip``: PPO's clipped surrogate objective, token by token."""

from __future__ import annotations

from typing import Any

import torch

from tackroom_losses.aggregation import Reduction, sequence_scale
from tackroom_losses.fusion import KernelOutput, run_loss
from tackroom_losses.inputs import prepare
from tackroom_losses.options import PpoClipOptions
from tackroom_losses.ratio import log_ratio, masked_fraction, ratio_moves, ratio_of, ratio_stats, row_sum


def ppo_clip_kernel(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    group_ids: torch.Tensor | None,
    num_groups: int,
    aggregation: Reduction,
    eps_clip_low: float,
    eps_clip_high: float,
    needs_grad: bool,
) -> KernelOutput:
    """The loss, its gradient and metrics as tensor math; :func:`ppo_clip` validates and may compile it.

    Per token ``-min(r A, clip(r) A)``; its derivative in ``log_probs`` is
    ``-r A`` where the unclipped term is the smaller one (ties included, as
    autograd splits them) and 0 where the clipped term wins.
    """
    mask = loss_mask.float()
    tokens = row_sum(mask)
    total = tokens.sum()
    scale = sequence_scale(tokens, aggregation, group_ids, num_groups)
    delta = log_ratio(log_probs, old_log_probs)
    ratio = ratio_of(delta)
    adv = advantages.float()
    surrogate = ratio * adv
    clipped = ratio.clamp(1.0 - eps_clip_low, 1.0 + eps_clip_high) * adv
    loss = (row_sum(-torch.minimum(surrogate, clipped) * mask) * scale.squeeze(-1)).sum()
    gradient = None
    if needs_grad:
        unclipped = (surrogate <= clipped) & ratio_moves(delta)
        gradient = torch.where(unclipped, -surrogate * mask, 0.0).to(log_probs.dtype)
    metrics = {"clip_ratio": masked_fraction(clipped < surrogate, mask, total)}
    metrics.update(ratio_stats(ratio, mask, total))
    return loss, gradient, scale, metrics


def ppo_clip(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    config: Any = None,
    loss_mask: torch.Tensor | None = None,
    rollout_logprobs: torch.Tensor | None = None,
    *,
    aggregation: Reduction = None,
    group_ids: torch.Tensor | None = None,
    num_groups: int | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO-clip: ``-min(r A, clip(r, 1-eps_low, 1+eps_high) A)`` with ``r = pi / pi_old`` per token.

    SkyRL's policy-loss signature; ``config`` is a :class:`PpoClipOptions`, a
    dict of its fields, or SkyRL's ``AlgorithmConfig``. ``rollout_logprobs``
    is accepted and unused (the ratio is against ``old_log_probs``).

    Returns ``(loss, metrics)``: the float32 scalar loss (the masked sum when
    ``aggregation`` is ``None``, as SkyRL expects after pre-scaling the
    advantages; the aggregated mean otherwise) and 0-dim tensors
    ``clip_ratio`` (fraction of valid tokens on the clipped branch),
    ``ratio_mean``, ``ratio_min``, ``ratio_max``.
    """
    options = PpoClipOptions.from_config(config)
    inputs = prepare(
        log_probs, advantages, loss_mask, aggregation=aggregation, group_ids=group_ids, num_groups=num_groups,
        old_log_probs=old_log_probs,
    )
    return run_loss(
        ppo_clip_kernel, options.fused, log_probs,
        old_log_probs, advantages, *inputs.kernel_args(), options.eps_clip_low, options.eps_clip_high,
    )

"""``glm5``: the agentic loss of the GLM-5 report (arXiv:2602.15763, section 4.1.2).

An importance-weighted policy gradient against the rollout engine's own
logprobs, so the trainer needs no extra forward pass of an "old" policy. The
weight ``r = pi / pi_rollout`` is detached and truncated: tokens whose ratio
leaves ``(1 - eps_low, 1 + eps_high)`` get weight 0 (IcePop-style), so a
token the trainer and the engine disagree on cannot move the policy.

    loss_t = -sg(r_t * [1 - eps_low < r_t < 1 + eps_high]) * A_t * log pi(a_t)
"""

from __future__ import annotations

from typing import Any

import torch

from tackroom_losses.aggregation import Reduction, sequence_scale
from tackroom_losses.errors import LossInputError
from tackroom_losses.fusion import KernelOutput, run_loss
from tackroom_losses.inputs import prepare
from tackroom_losses.options import Glm5Options
from tackroom_losses.ratio import importance_ratio, masked_fraction, ratio_stats, row_sum


def glm5_kernel(
    log_probs: torch.Tensor,
    rollout_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    group_ids: torch.Tensor | None,
    num_groups: int,
    aggregation: Reduction,
    eps_clip_low: float,
    eps_clip_high: float,
    needs_grad: bool,
) -> KernelOutput:
    """The loss, its gradient and metrics as tensor math; :func:`glm5` validates and may compile it.

    Per token ``-w A log pi`` with the weight ``w`` detached, so the
    derivative in ``log_probs`` is ``-w A``.
    """
    mask = loss_mask.float()
    tokens = row_sum(mask)
    total = tokens.sum()
    scale = sequence_scale(tokens, aggregation, group_ids, num_groups)
    ratio = importance_ratio(log_probs, rollout_logprobs)
    inside = (ratio > 1.0 - eps_clip_low) & (ratio < 1.0 + eps_clip_high)
    slope = torch.where(inside, -ratio * advantages.float(), 0.0) * mask
    loss = (row_sum(slope * log_probs.float()) * scale.squeeze(-1)).sum()
    gradient = slope.to(log_probs.dtype) if needs_grad else None
    metrics = {"clip_ratio": masked_fraction(~inside, mask, total)}
    metrics.update(ratio_stats(ratio, mask, total))
    return loss, gradient, scale, metrics


def glm5(
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
    """GLM-5 agentic loss: truncated, detached importance weight against ``rollout_logprobs``.

    ``old_log_probs`` is accepted and unused. SkyRL's policy-loss signature;
    ``config`` is a :class:`Glm5Options`, a dict of its fields, or SkyRL's
    ``AlgorithmConfig``. Returns ``(loss, metrics)`` as
    :func:`~tackroom_losses.ppo_clip.ppo_clip` does; ``clip_ratio`` is the
    fraction of valid tokens whose weight was truncated to 0.
    """
    if rollout_logprobs is None:
        raise LossInputError(
            "glm5 weighs tokens against the rollout engine's logprobs; pass rollout_logprobs "
            "(the trajectory's per-token logprobs, [batch, tokens])"
        )
    options = Glm5Options.from_config(config)
    inputs = prepare(
        log_probs, advantages, loss_mask, aggregation=aggregation, group_ids=group_ids, num_groups=num_groups,
        rollout_logprobs=rollout_logprobs,
    )
    return run_loss(
        glm5_kernel, options.fused, log_probs,
        rollout_logprobs, advantages, *inputs.kernel_args(), options.eps_clip_low, options.eps_clip_high,
    )

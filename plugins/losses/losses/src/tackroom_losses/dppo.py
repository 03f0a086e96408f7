"""``dppo``: Divergence PPO, a binary trust-region mask instead of ratio clipping.

From "Rethinking the Trust Region in LLM Reinforcement Learning"
(arXiv:2602.04879). The behaviour policy is the rollout engine's (its
logprobs come with the trajectory), so no extra forward pass is needed. A
token's gradient is cut when the update would push the trainer's probability
of the sampled token further from the rollout's than the trust region allows:

- ``binary_tv``: blocked when ``A > 0`` and ``pi - mu > delta_high``, or
  ``A < 0`` and ``mu - pi > delta_low``;
- ``binary_kl``: the same directions, measured by the KL between the two
  Bernoulli distributions {sampled token, anything else}.
"""

from __future__ import annotations

from typing import Any

import torch

from tackroom_losses.aggregation import Reduction, sequence_scale
from tackroom_losses.fusion import KernelOutput, run_loss
from tackroom_losses.inputs import prepare
from tackroom_losses.options import DppoOptions
from tackroom_losses.ratio import log_ratio, masked_fraction, ratio_moves, ratio_of, ratio_stats, row_sum

BERNOULLI_EPS = 1e-8
"""Keeps log((1 - mu) / (1 - pi)) finite when a probability rounds to 1."""


def dppo_kernel(
    log_probs: torch.Tensor,
    behaviour_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    group_ids: torch.Tensor | None,
    num_groups: int,
    aggregation: Reduction,
    divergence: str,
    delta_low: float,
    delta_high: float,
    needs_grad: bool,
) -> KernelOutput:
    """The loss, its gradient and metrics as tensor math; :func:`dppo` validates and may compile it.

    Per token ``-(r A keep)``; the mask is a decision, not differentiated, so
    the derivative in ``log_probs`` is the term itself (``d r = r d log pi``).
    """
    mask = loss_mask.float()
    tokens = row_sum(mask)
    total = tokens.sum()
    scale = sequence_scale(tokens, aggregation, group_ids, num_groups)
    adv = advantages.float()
    delta = log_ratio(log_probs, behaviour_log_probs)
    ratio = ratio_of(delta)
    lp = log_probs.float()
    mu_lp = behaviour_log_probs.float()
    pi, mu = lp.exp(), mu_lp.exp()
    gap = pi - mu
    if divergence == "binary_tv":
        size = gap.abs()
        blocked = ((adv > 0) & (gap > delta_high)) | ((adv < 0) & (-gap > delta_low))
    else:  # binary_kl
        size = mu * (mu_lp - lp) + (1.0 - mu) * torch.log((1.0 - mu + BERNOULLI_EPS) / (1.0 - pi + BERNOULLI_EPS))
        blocked = ((adv > 0) & (gap > 0) & (size > delta_high)) | ((adv < 0) & (gap < 0) & (size > delta_low))
    term = torch.where(blocked, 0.0, -ratio * adv) * mask
    loss = (row_sum(term) * scale.squeeze(-1)).sum()
    gradient = torch.where(ratio_moves(delta), term, 0.0).to(log_probs.dtype) if needs_grad else None
    metrics = {
        "clip_ratio": masked_fraction(blocked, mask, total),
        "divergence_mean": row_sum(size * mask).sum() / total.clamp(min=1.0),
    }
    metrics.update(ratio_stats(ratio, mask, total))
    return loss, gradient, scale, metrics


def dppo(
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
    """DPPO: ``-(r A keep)`` with ``r = pi / mu`` and ``keep`` the binary trust-region mask.

    ``mu`` is the rollout policy (``rollout_logprobs``); without them,
    ``old_log_probs`` stands in. SkyRL's policy-loss signature; ``config`` is
    a :class:`DppoOptions`, a dict of its fields, or SkyRL's
    ``AlgorithmConfig`` (its ``dppo`` section).

    Returns ``(loss, metrics)`` as :func:`~tackroom_losses.ppo_clip.ppo_clip`
    does; ``clip_ratio`` is the fraction of valid tokens the mask blocks and
    ``divergence_mean`` the mean TV (or binary KL) over valid tokens.
    """
    options = DppoOptions.from_config(config)
    behaviour = rollout_logprobs if rollout_logprobs is not None else old_log_probs
    inputs = prepare(
        log_probs, advantages, loss_mask, aggregation=aggregation, group_ids=group_ids, num_groups=num_groups,
        behaviour_log_probs=behaviour,
    )
    return run_loss(
        dppo_kernel, options.fused, log_probs,
        behaviour, advantages, *inputs.kernel_args(), options.divergence, options.delta_low, options.delta_high,
    )

"""Putting tackroom losses into SkyRL's ``PolicyLossRegistry``.

The loss functions already take SkyRL's arguments. Two things differ, on
purpose, and this module bridges them:

- our metrics are 0-dim tensors (no host sync inside the loss), while
  SkyRL's ``reduce_metrics`` keeps only Python numbers: :func:`for_skyrl`
  converts them with one transfer per call;
- our functions aggregate only when told to; under SkyRL they are called
  without ``aggregation=`` and return the masked sum, which is what SkyRL
  0.4 wants after scaling advantages by its ``loss_reduction``. Set
  ``trainer.algorithm.loss_reduction`` to the spec's aggregation
  (``token_mean``, ``sequence_mean`` and ``prompt_mean`` mean the same in
  both).

SkyRL is not imported here; the trainer passes its registry class in.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import torch

import tackroom
from tackroom_losses.errors import LossConfigError


def metrics_to_floats(metrics: dict[str, Any]) -> dict[str, float]:
    """Python floats for a dict of 0-dim tensors, in one device-to-host copy."""
    keys = [k for k, v in metrics.items() if isinstance(v, torch.Tensor)]
    values = torch.stack([metrics[k].detach().float() for k in keys]).tolist() if keys else []
    out = {k: float(v) for k, v in metrics.items() if not isinstance(v, torch.Tensor)}
    out.update(zip(keys, values, strict=True))
    return out


def for_skyrl(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with SkyRL's exact contract: same arguments, metrics as floats."""

    @functools.wraps(fn)
    def skyrl_policy_loss(log_probs, old_log_probs, advantages, config, loss_mask=None, rollout_logprobs=None):
        loss, metrics = fn(log_probs, old_log_probs, advantages, config, loss_mask, rollout_logprobs)
        return loss, metrics_to_floats(metrics)

    return skyrl_policy_loss


def register_with_skyrl(registry: Any, specs: Iterable[tackroom.LossSpec], *, prefix: str = "tackroom_") -> list[str]:
    """Register each spec's function in SkyRL's ``PolicyLossRegistry`` as ``prefix + name``.

    The prefix keeps SkyRL's own built-ins (it has a ``dppo`` too) in place, so
    both can run side by side; select ours with
    ``trainer.algorithm.policy_loss_type=tackroom_dppo``. A name registered
    earlier under the prefix is replaced, so re-running a trainer in one
    process is harmless. Returns the names registered.
    """
    if not prefix:
        raise LossConfigError("register_with_skyrl needs a non-empty prefix; SkyRL's built-ins share our names")
    names = []
    for spec in specs:
        name = prefix + spec.name
        if name in registry.list_available():
            registry.unregister(name)
        registry.register(name, for_skyrl(spec.load()))
        names.append(name)
    return names

"""Checks on the tensors a loss receives: shapes and devices, never values (no sync)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tackroom_losses.aggregation import Reduction, check_aggregation, resolve_groups
from tackroom_losses.errors import LossInputError


@dataclass(frozen=True)
class LossInputs:
    """What every loss kernel needs besides its own tensors."""

    loss_mask: torch.Tensor
    group_ids: torch.Tensor | None
    num_groups: int
    aggregation: Reduction

    def kernel_args(self) -> tuple:
        """What every loss kernel takes after its own tensors, in order."""
        return self.loss_mask, self.group_ids, self.num_groups, self.aggregation


def prepare(
    log_probs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor | None,
    *,
    aggregation: Reduction,
    group_ids: torch.Tensor | None,
    num_groups: int | None,
    **others: torch.Tensor | None,
) -> LossInputs:
    """Validate shapes and the aggregation; fill in a missing loss mask (every token valid)."""
    check_aggregation(aggregation)
    if not isinstance(log_probs, torch.Tensor) or log_probs.dim() != 2:
        shape = list(log_probs.shape) if isinstance(log_probs, torch.Tensor) else type(log_probs).__name__
        raise LossInputError(f"log_probs must be a [batch, tokens] tensor, got {shape}")
    if log_probs.numel() == 0:
        raise LossInputError(f"log_probs is empty (shape {list(log_probs.shape)}); skip empty micro-batches before the loss")
    if not log_probs.dtype.is_floating_point:
        raise LossInputError(f"log_probs must be floating point (float32 or bfloat16), got {log_probs.dtype}")
    named = {"advantages": advantages, "loss_mask": loss_mask, **others}
    for name, tensor in named.items():
        if tensor is None:
            continue
        if tensor.shape != log_probs.shape:
            raise LossInputError(
                f"{name} has shape {list(tensor.shape)} but log_probs has {list(log_probs.shape)}; "
                "every per-token tensor must be [batch, tokens] with the same padding"
            )
        if tensor.device != log_probs.device:
            raise LossInputError(f"{name} is on {tensor.device} but log_probs is on {log_probs.device}")
    if loss_mask is None:
        loss_mask = torch.ones_like(log_probs, dtype=torch.bool)
    ids, groups = resolve_groups(aggregation, log_probs.shape[0], group_ids, num_groups)
    if ids is not None and ids.device != log_probs.device:
        raise LossInputError(f"group_ids is on {ids.device} but log_probs is on {log_probs.device}")
    return LossInputs(loss_mask, ids, groups, aggregation)

"""How per-token losses become one number: ``token_mean``, ``sequence_mean``, ``prompt_mean``.

Every aggregation here is a per-sequence factor ``c_b`` so that

    aggregate = sum over sequences b, tokens t of  c_b * m_bt * loss_bt

with ``m`` the loss mask. That one form serves both ways of using it:

- in the loss call (``aggregation=`` on any loss in this package), and
- SkyRL 0.4's contract, where the trainer multiplies the advantages by
  ``c_b`` (:func:`scale_advantages`, the vectorised counterpart of SkyRL's
  ``apply_loss_reduction_to_advantages_minibatch``) and the loss returns the
  masked sum. All losses here are positively homogeneous in the advantage
  (clip and mask decisions depend only on its sign), so both give the same
  loss and the same gradient.

The factors, for a batch of ``B`` sequences in ``G`` prompt groups:

- ``token_mean``:    1 / max(sum of m, 1)            one pool of tokens; long trajectories weigh more
- ``sequence_mean``: 1 / (B * max(n_b, 1))           each sequence equal (GRPO)
- ``prompt_mean``:   1 / (G * max(N_g(b), 1))        each prompt group equal, tokens equal within it (DAPO)

with ``n_b`` the valid tokens of sequence b and ``N_g`` those of group g. A
sequence (or group) with no valid token contributes nothing but still counts
in ``B`` (or ``G``): the same convention as SkyRL, so the gradient scale does
not jump when a filter masks a group out.

Nothing here synchronises with the device: no ``.item()``, no data-dependent
shapes, no Python loop over sequences or groups.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

import tackroom
from tackroom_losses.errors import LossConfigError, LossInputError

Reduction = tackroom.Aggregation | None
"""An aggregation name, or ``None`` for the plain masked sum (SkyRL 0.4's contract)."""


def check_aggregation(aggregation: object) -> None:
    """Raise :class:`LossConfigError` unless ``aggregation`` is a known name or ``None``."""
    if aggregation is not None and aggregation not in tackroom.AGGREGATIONS:
        raise LossConfigError(
            f"unknown aggregation {aggregation!r}; use one of {', '.join(tackroom.AGGREGATIONS)} "
            "(or None for the masked sum SkyRL expects when it pre-scales advantages)"
        )


def resolve_groups(
    aggregation: Reduction, batch_size: int, group_ids: torch.Tensor | None, num_groups: int | None
) -> tuple[torch.Tensor | None, int]:
    """Check the grouping ``prompt_mean`` needs; returns ``(group_ids, num_groups)``.

    ``num_groups`` should be passed: without it, it is read from ``group_ids``,
    which costs a device synchronisation when ``group_ids`` lives on a GPU.
    """
    if aggregation != "prompt_mean":
        return None, 0
    if group_ids is None:
        raise LossConfigError(
            "prompt_mean needs group_ids: a LongTensor [batch] giving each sequence's prompt group "
            "(0..num_groups-1); build it from SkyRL's prompt_boundaries with group_ids_from_boundaries()"
        )
    if group_ids.dim() != 1 or group_ids.shape[0] != batch_size:
        raise LossInputError(f"group_ids must have shape [{batch_size}] (one id per sequence), got {list(group_ids.shape)}")
    if group_ids.dtype.is_floating_point or group_ids.dtype == torch.bool:
        raise LossInputError(f"group_ids must be an integer tensor, got {group_ids.dtype}")
    if num_groups is None:
        num_groups = int(group_ids.max()) + 1 if batch_size else 0
    if num_groups < 1 and batch_size:
        raise LossInputError(f"num_groups must be at least 1, got {num_groups}")
    return group_ids.long(), num_groups


def row_tokens(loss_mask: torch.Tensor) -> torch.Tensor:
    """Valid-token weight per sequence, ``[B]`` float32 (a bool mask is not copied to float first)."""
    return loss_mask.sum(dim=-1, dtype=torch.float32)


def sequence_scale(
    tokens_per_row: torch.Tensor,
    aggregation: Reduction,
    group_ids: torch.Tensor | None = None,
    num_groups: int = 0,
) -> torch.Tensor:
    """The factor ``c_b`` of each sequence, shape ``[B, 1]`` float32 (see the module docstring).

    Pure tensor math, safe inside ``torch.compile``: callers validate first
    (:func:`check_aggregation`, :func:`resolve_groups`).
    """
    n = tokens_per_row.float()
    batch = n.shape[0]
    if aggregation is None:
        scale = torch.ones_like(n)
    elif aggregation == "token_mean":
        scale = torch.ones_like(n) / n.sum().clamp(min=1.0)
    elif aggregation == "sequence_mean":
        scale = 1.0 / (batch * n.clamp(min=1.0))
    else:  # prompt_mean
        assert group_ids is not None
        per_group = torch.zeros(num_groups, dtype=n.dtype, device=n.device).index_add_(0, group_ids, n)
        scale = 1.0 / (num_groups * per_group.clamp(min=1.0)).index_select(0, group_ids)
    return scale.unsqueeze(-1)


def aggregation_scale(
    loss_mask: torch.Tensor,
    aggregation: Reduction,
    *,
    group_ids: torch.Tensor | None = None,
    num_groups: int | None = None,
) -> torch.Tensor:
    """``c_b`` for a ``[B, T]`` loss mask, shape ``[B, 1]`` float32."""
    check_aggregation(aggregation)
    if loss_mask.dim() != 2:
        raise LossInputError(f"loss_mask must be [batch, tokens], got shape {list(loss_mask.shape)}")
    ids, groups = resolve_groups(aggregation, loss_mask.shape[0], group_ids, num_groups)
    return mask_scale(loss_mask, ids, groups, aggregation)


def mask_scale(
    loss_mask: torch.Tensor, group_ids: torch.Tensor | None, num_groups: int, aggregation: Reduction
) -> torch.Tensor:
    """:func:`sequence_scale` straight from a ``[B, T]`` mask; unchecked, safe inside ``torch.compile``."""
    if aggregation is None:  # the masked sum needs no pass over the mask
        return torch.ones(loss_mask.shape[0], 1, dtype=torch.float32, device=loss_mask.device)
    return sequence_scale(row_tokens(loss_mask), aggregation, group_ids, num_groups)


def scale_advantages(
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    aggregation: tackroom.Aggregation,
    *,
    group_ids: torch.Tensor | None = None,
    num_groups: int | None = None,
) -> torch.Tensor:
    """Advantages multiplied by ``c_b``: summing the per-token loss then yields ``aggregation``.

    What SkyRL 0.4 does per mini-batch before calling a policy loss
    (``apply_loss_reduction_to_advantages_minibatch``), without its Python
    loop over prompts. Call it once per mini-batch, then call the loss on each
    micro-batch with ``aggregation=None`` and sum the gradients.
    """
    if advantages.shape != loss_mask.shape:
        raise LossInputError(f"advantages {list(advantages.shape)} and loss_mask {list(loss_mask.shape)} differ in shape")
    return advantages * aggregation_scale(loss_mask, aggregation, group_ids=group_ids, num_groups=num_groups).to(
        advantages.dtype
    )


def aggregate(
    values: torch.Tensor,
    loss_mask: torch.Tensor | None,
    aggregation: Reduction,
    *,
    group_ids: torch.Tensor | None = None,
    num_groups: int | None = None,
) -> torch.Tensor:
    """Aggregate a ``[B, T]`` per-token tensor into a float32 scalar."""
    mask = torch.ones_like(values, dtype=torch.bool) if loss_mask is None else loss_mask
    if mask.shape != values.shape:
        raise LossInputError(f"values {list(values.shape)} and loss_mask {list(mask.shape)} differ in shape")
    scale = aggregation_scale(mask, aggregation, group_ids=group_ids, num_groups=num_groups)
    return (values.float() * mask.float() * scale).sum()


def group_ids_from_boundaries(
    boundaries: Sequence[tuple[int, int]], *, device: torch.device | str | None = None
) -> tuple[torch.Tensor, int]:
    """``(group_ids, num_groups)`` from SkyRL's ``prompt_boundaries`` (contiguous ``(start, end)`` slices).

    Built on the host from Python ints and copied once: no device synchronisation.
    """
    ids: list[int] = []
    expected = 0
    for g, (start, end) in enumerate(boundaries):
        if start != expected or end < start:
            raise LossInputError(
                f"prompt boundaries must be contiguous (start, end) slices from 0; slice {g} is ({start}, {end}) "
                f"but the previous one ended at {expected}"
            )
        ids.extend([g] * (end - start))
        expected = end
    return torch.tensor(ids, dtype=torch.long).to(device or "cpu", non_blocking=True), len(boundaries)

"""Ragged batches shaped like agent trajectories: right-padded, grouped by prompt."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch


@dataclass
class Batch:
    """One mini-batch as a trainer hands it to a loss."""

    log_probs: torch.Tensor
    old_log_probs: torch.Tensor
    rollout_logprobs: torch.Tensor
    advantages: torch.Tensor
    loss_mask: torch.Tensor
    group_ids: torch.Tensor
    num_groups: int
    boundaries: list[tuple[int, int]]

    def args(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.log_probs, self.old_log_probs, self.advantages

    def leaf(self) -> torch.Tensor:
        """A fresh ``log_probs`` leaf that records gradients."""
        return self.log_probs.detach().clone().requires_grad_(True)


def make_batch(
    lengths: list[list[int]],
    *,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    drift: float = 0.3,
    device: str = "cpu",
) -> Batch:
    """``lengths[g]`` are the valid-token counts of group g's sequences.

    Token probabilities are spread over (0.02, 1) so the DPPO thresholds bite;
    old and rollout logprobs drift from the current ones by ``drift`` in log
    space; advantages are the group-normalised reward of each sequence,
    broadcast over its tokens (as GRPO gives them).
    """
    gen = torch.Generator().manual_seed(seed)
    rows = [n for group in lengths for n in group]
    batch, width = len(rows), max(rows)
    probs = torch.rand(batch, width, generator=gen) * 0.98 + 0.02
    log_probs = probs.log()
    old = (log_probs + drift * torch.randn(batch, width, generator=gen)).clamp(max=0.0)
    rollout = (log_probs + drift * torch.randn(batch, width, generator=gen)).clamp(max=0.0)
    mask = torch.arange(width).unsqueeze(0) < torch.tensor(rows).unsqueeze(1)
    rewards = torch.rand(batch, generator=gen)
    group_ids = torch.tensor([g for g, group in enumerate(lengths) for _ in group])
    adv = torch.empty(batch)
    boundaries, start = [], 0
    for group in lengths:
        end = start + len(group)
        r = rewards[start:end]
        adv[start:end] = (r - r.mean()) / (r.std(unbiased=False) + 1e-6) if len(group) > 1 else r - 0.5
        boundaries.append((start, end))
        start = end
    advantages = adv.unsqueeze(1).expand(batch, width).contiguous()

    def put(t: torch.Tensor) -> torch.Tensor:
        return t.to(device=device, dtype=dtype)

    return Batch(
        put(log_probs), put(old), put(rollout), put(advantages), mask.to(device), group_ids.to(device), len(lengths),
        boundaries,
    )


def random_lengths(seed: int, groups: int = 4, per_group: int = 4, low: int = 1, high: int = 64) -> list[list[int]]:
    gen = torch.Generator().manual_seed(1000 + seed)
    return [torch.randint(low, high + 1, (per_group,), generator=gen).tolist() for _ in range(groups)]


@pytest.fixture
def batch() -> Batch:
    return make_batch(random_lengths(0))


@pytest.fixture
def batches():
    """The batch factory, for tests that shape their own: ``batches(lengths, seed=..., dtype=...)``."""
    return make_batch


@pytest.fixture
def lengths():
    """Random group lengths: ``lengths(seed, groups=4, per_group=4, low=1, high=64)``."""
    return random_lengths

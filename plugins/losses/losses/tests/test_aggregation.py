"""token_mean, sequence_mean, prompt_mean: hand-computed cases, long-trajectory dominance, edge cases."""

from __future__ import annotations

import pytest
import torch

from tackroom_losses.aggregation import (
    aggregate,
    aggregation_scale,
    group_ids_from_boundaries,
    scale_advantages,
)
from tackroom_losses.dppo import dppo
from tackroom_losses.errors import LossConfigError, LossInputError
from tackroom_losses.glm5 import glm5
from tackroom_losses.ppo_clip import ppo_clip

LOSSES = [ppo_clip, dppo, glm5]
AGGREGATIONS = ["token_mean", "sequence_mean", "prompt_mean"]

# Three sequences, two prompt groups: {row 0, row 1} and {row 2}.
VALUES = torch.tensor([[1.0, 2.0, 3.0, 99.0], [4.0, 99.0, 99.0, 99.0], [5.0, 7.0, 99.0, 99.0]])
MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 0, 0]], dtype=torch.bool)
GROUPS = torch.tensor([0, 0, 1])


def test_token_mean_by_hand():
    assert aggregate(VALUES, MASK, "token_mean").item() == pytest.approx((1 + 2 + 3 + 4 + 5 + 7) / 6)


def test_sequence_mean_by_hand():
    expected = ((1 + 2 + 3) / 3 + 4 / 1 + (5 + 7) / 2) / 3
    assert aggregate(VALUES, MASK, "sequence_mean").item() == pytest.approx(expected)


def test_prompt_mean_by_hand():
    # group 0 pools its 4 tokens, group 1 its 2; then the two groups count equally
    expected = ((1 + 2 + 3 + 4) / 4 + (5 + 7) / 2) / 2
    got = aggregate(VALUES, MASK, "prompt_mean", group_ids=GROUPS, num_groups=2)
    assert got.item() == pytest.approx(expected)


def test_none_is_the_masked_sum():
    assert aggregate(VALUES, MASK, None).item() == pytest.approx(1 + 2 + 3 + 4 + 5 + 7)


def test_num_groups_is_read_from_group_ids_when_not_given():
    given = aggregate(VALUES, MASK, "prompt_mean", group_ids=GROUPS, num_groups=2)
    assert aggregate(VALUES, MASK, "prompt_mean", group_ids=GROUPS).item() == pytest.approx(given.item())


def _group_shares(lengths: list[list[int]], aggregation: str, batches) -> torch.Tensor:
    """Each prompt group's share of the total gradient magnitude of a real ppo_clip loss."""
    b = batches(lengths, seed=3, drift=0.0)
    # equal-magnitude advantages, so only the aggregation decides a token's weight
    adv = torch.where(b.advantages >= 0, 1.0, -1.0)
    lp = b.leaf()
    loss, _ = ppo_clip(lp, b.old_log_probs, adv, None, b.loss_mask, aggregation=aggregation,
                       group_ids=b.group_ids, num_groups=b.num_groups)
    loss.backward()
    per_row = lp.grad.abs().sum(dim=1)
    shares = torch.zeros(b.num_groups).index_add_(0, b.group_ids, per_row)
    return shares / shares.sum()


LONG_TAIL = [
    [131_072, 120_000, 110_000, 128_000],  # one prompt whose agent ran for ~128k tokens per attempt
    [2_048, 3_000, 2_500, 4_096],
    [8_192, 6_000, 9_000, 4_000],
    [16_384, 12_000, 2_048, 10_000],
]


def test_longest_prompt_group_dominates_token_mean(batches):
    shares = _group_shares(LONG_TAIL, "token_mean", batches)
    tokens = torch.tensor([sum(g) for g in LONG_TAIL], dtype=torch.float32)
    assert shares[0] > 0.8, f"under token_mean the 128k group should dominate: {shares.tolist()}"
    assert torch.allclose(shares, tokens / tokens.sum(), rtol=1e-3)


def test_prompt_mean_gives_every_group_an_equal_share(batches):
    shares = _group_shares(LONG_TAIL, "prompt_mean", batches)
    assert torch.allclose(shares, torch.full((4,), 0.25), atol=1e-4), shares.tolist()


def test_sequence_mean_gives_every_sequence_an_equal_share(batches):
    b = batches(LONG_TAIL, seed=3, drift=0.0)
    adv = torch.where(b.advantages >= 0, 1.0, -1.0)
    lp = b.leaf()
    loss, _ = ppo_clip(lp, b.old_log_probs, adv, None, b.loss_mask, aggregation="sequence_mean")
    loss.backward()
    per_row = lp.grad.abs().sum(dim=1)
    assert torch.allclose(per_row / per_row.sum(), torch.full((16,), 1 / 16), atol=1e-5)


def test_tokens_within_a_group_weigh_equally_under_prompt_mean():
    scale = aggregation_scale(MASK, "prompt_mean", group_ids=GROUPS, num_groups=2)
    assert scale[0].item() == scale[1].item() == pytest.approx(1 / (2 * 4))
    assert scale[2].item() == pytest.approx(1 / (2 * 2))


@pytest.mark.parametrize("loss_fn", LOSSES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_prescaled_advantages_give_the_same_loss_and_gradient(loss_fn, aggregation, batch):
    """SkyRL 0.4's route (scale advantages, masked sum) equals aggregating in the call."""
    kw = dict(group_ids=batch.group_ids, num_groups=batch.num_groups)
    lp1, lp2 = batch.leaf(), batch.leaf()
    inside, _ = loss_fn(lp1, batch.old_log_probs, batch.advantages, None, batch.loss_mask, batch.rollout_logprobs,
                        aggregation=aggregation, **kw)
    scaled = scale_advantages(batch.advantages, batch.loss_mask, aggregation, **kw)
    outside, _ = loss_fn(lp2, batch.old_log_probs, scaled, None, batch.loss_mask, batch.rollout_logprobs)
    inside.backward()
    outside.backward()
    assert outside.item() == pytest.approx(inside.item(), rel=1e-5, abs=1e-7)
    assert torch.allclose(lp1.grad, lp2.grad, rtol=1e-5, atol=1e-9)


# -- edge cases ---------------------------------------------------------------------


@pytest.mark.parametrize("loss_fn", LOSSES, ids=lambda f: f.__name__)
def test_all_masked_row_contributes_nothing_and_counts_in_sequence_mean(loss_fn, batch):
    mask = batch.loss_mask.clone()
    mask[1] = False
    lp = batch.leaf()
    common = (batch.old_log_probs, batch.advantages, None, mask, batch.rollout_logprobs)
    token, _ = loss_fn(lp, *common, aggregation="token_mean")
    token.backward()
    assert torch.isfinite(token) and torch.all(lp.grad[1] == 0)
    # dropping the masked row changes nothing under token_mean ...
    keep = [i for i in range(mask.shape[0]) if i != 1]
    rest = [t[keep] for t in (batch.log_probs, batch.old_log_probs, batch.advantages)]
    without, _ = loss_fn(*rest, None, mask[keep], batch.rollout_logprobs[keep], aggregation="token_mean")
    assert token.item() == pytest.approx(without.item(), rel=1e-6)
    # ... while sequence_mean still divides by every row, as SkyRL does
    seq, _ = loss_fn(batch.log_probs, *common, aggregation="sequence_mean")
    seq_without, _ = loss_fn(*rest, None, mask[keep], batch.rollout_logprobs[keep], aggregation="sequence_mean")
    rows = mask.shape[0]
    assert seq.item() == pytest.approx(seq_without.item() * (rows - 1) / rows, rel=1e-5)


@pytest.mark.parametrize("aggregation", [None, *AGGREGATIONS])
def test_everything_masked_gives_zero_loss_zero_gradient_and_neutral_metrics(aggregation, batch):
    mask = torch.zeros_like(batch.loss_mask)
    lp = batch.leaf()
    loss, metrics = ppo_clip(lp, batch.old_log_probs, batch.advantages, None, mask, aggregation=aggregation,
                             group_ids=batch.group_ids, num_groups=batch.num_groups)
    loss.backward()
    assert loss.item() == 0.0
    assert torch.all(lp.grad == 0)
    assert metrics["clip_ratio"].item() == 0.0
    assert metrics["ratio_mean"].item() == metrics["ratio_min"].item() == metrics["ratio_max"].item() == 1.0


def test_empty_group_contributes_nothing_but_counts():
    # group 2 has no sequence at all, group 1 only masked tokens
    mask = MASK.clone()
    mask[2] = False
    three = aggregate(VALUES, mask, "prompt_mean", group_ids=GROUPS, num_groups=3)
    assert torch.isfinite(three)
    assert three.item() == pytest.approx((1 + 2 + 3 + 4) / 4 / 3)


def test_single_token():
    values, mask = torch.tensor([[3.0]]), torch.tensor([[True]])
    for aggregation in AGGREGATIONS:
        got = aggregate(values, mask, aggregation, group_ids=torch.tensor([0]), num_groups=1)
        assert got.item() == 3.0


def test_float_loss_mask_weighs_tokens():
    weights = MASK.float() * 0.5
    assert aggregate(VALUES, weights, None).item() == pytest.approx(0.5 * (1 + 2 + 3 + 4 + 5 + 7))
    assert aggregate(VALUES, weights, "token_mean").item() == pytest.approx((1 + 2 + 3 + 4 + 5 + 7) / 6)


# -- SkyRL's prompt boundaries -----------------------------------------------------


def test_group_ids_from_boundaries():
    ids, groups = group_ids_from_boundaries([(0, 2), (2, 3), (3, 7)])
    assert groups == 3
    assert ids.tolist() == [0, 0, 1, 2, 2, 2, 2]


def test_non_contiguous_boundaries_are_refused():
    with pytest.raises(LossInputError, match="contiguous"):
        group_ids_from_boundaries([(0, 2), (3, 5)])


# -- errors a caller can hit -------------------------------------------------------


def test_unknown_aggregation_lists_the_valid_ones():
    with pytest.raises(LossConfigError, match="token_mean, sequence_mean, prompt_mean"):
        aggregate(VALUES, MASK, "mean")


def test_prompt_mean_without_groups_says_how_to_build_them(batch):
    with pytest.raises(LossConfigError, match="group_ids_from_boundaries"):
        ppo_clip(*batch.args(), None, batch.loss_mask, aggregation="prompt_mean")


def test_group_ids_of_the_wrong_shape_or_type(batch):
    with pytest.raises(LossInputError, match="one id per sequence"):
        ppo_clip(*batch.args(), None, batch.loss_mask, aggregation="prompt_mean", group_ids=torch.tensor([0, 1]))
    with pytest.raises(LossInputError, match="integer"):
        ppo_clip(*batch.args(), None, batch.loss_mask, aggregation="prompt_mean",
                 group_ids=batch.group_ids.float())


def test_scale_advantages_refuses_mismatched_shapes():
    with pytest.raises(LossInputError, match="differ in shape"):
        scale_advantages(torch.ones(3, 5), MASK, "token_mean")

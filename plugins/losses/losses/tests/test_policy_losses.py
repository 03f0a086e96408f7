"""ppo_clip, dppo, glm5: hand-computed values and gradients, masks, dtypes, config, no host sync."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tackroom_losses import DppoOptions, PpoClipOptions
from tackroom_losses.dppo import dppo
from tackroom_losses.errors import LossConfigError, LossInputError
from tackroom_losses.glm5 import glm5
from tackroom_losses.ppo_clip import ppo_clip

LOSSES = [ppo_clip, dppo, glm5]
AGGREGATIONS = [None, "token_mean", "sequence_mean", "prompt_mean"]


def row(*values: float, grad: bool = False) -> torch.Tensor:
    t = torch.tensor([values], dtype=torch.float32)
    return t.requires_grad_(True) if grad else t


def value_and_grad(loss_fn, log_probs, *rest, **kw):
    loss, metrics = loss_fn(log_probs, *rest, **kw)
    loss.backward()
    return loss.item(), log_probs.grad[0].tolist(), {k: v.item() for k, v in metrics.items()}


# -- ppo_clip by hand ----------------------------------------------------------------


def test_ppo_clip_by_hand():
    # ratios 0.5, 1.0, 1.5, 1.1 against the old policy; eps 0.2
    old = row(-1.0, -1.0, -1.0, -1.0)
    lp = (old + torch.log(row(0.5, 1.0, 1.5, 1.1))).detach().requires_grad_(True)
    adv = row(1.0, -1.0, 1.0, -1.0)
    loss, grad, metrics = value_and_grad(ppo_clip, lp, old, adv)
    # per token: -min(rA, clip(r)A) = -0.5, 1.0, -1.2 (clipped), 1.1
    assert loss == pytest.approx(-0.5 + 1.0 - 1.2 + 1.1, abs=1e-6)
    # d/dlogp = -A r where the unclipped branch is active, 0 where clipped
    assert grad == pytest.approx([-0.5, 1.0, 0.0, 1.1], abs=1e-6)
    assert metrics["clip_ratio"] == pytest.approx(0.25)
    assert metrics["ratio_min"] == pytest.approx(0.5) and metrics["ratio_max"] == pytest.approx(1.5)
    assert metrics["ratio_mean"] == pytest.approx((0.5 + 1.0 + 1.5 + 1.1) / 4)


def test_ppo_clip_asymmetric_range_from_options():
    old = row(-1.0, -1.0)
    lp = (old + torch.log(row(1.25, 0.7))).detach().requires_grad_(True)
    adv = row(1.0, -1.0)
    opts = PpoClipOptions(eps_clip_low=0.1, eps_clip_high=0.28)  # DAPO's clip-higher
    loss, grad, metrics = value_and_grad(ppo_clip, lp, old, adv, opts)
    # 1.25 < 1.28: unclipped; 0.7 < 0.9 with A<0: -min(-0.7, -0.9) = 0.9, clipped
    assert loss == pytest.approx(-1.25 + 0.9, abs=1e-6)
    assert grad == pytest.approx([-1.25, 0.0], abs=1e-6)
    assert metrics["clip_ratio"] == pytest.approx(0.5)


# -- dppo by hand --------------------------------------------------------------------


def test_dppo_binary_tv_by_hand():
    mu = row(0.5, 0.5, 0.5, 0.5, 0.3)
    pi = row(0.7, 0.6, 0.3, 0.7, 0.1)
    adv = row(1.0, 1.0, -1.0, -1.0, -1.0)
    lp = pi.log().requires_grad_(True)
    loss, grad, metrics = value_and_grad(dppo, lp, torch.zeros_like(mu), adv, None, None, mu.log())
    # token 0: A>0 and pi-mu = 0.2 > 0.15 -> blocked; token 1: 0.1 -> kept
    # token 2: A<0 and mu-pi = 0.2 > 0.15 -> blocked; token 3: A<0 but pi rose -> kept
    # token 4: A<0 and mu-pi = 0.2 -> blocked
    ratio = [0.7 / 0.5, 0.6 / 0.5, 0.3 / 0.5, 0.7 / 0.5, 0.1 / 0.3]
    keep = [0, 1, 0, 1, 0]
    a = [1, 1, -1, -1, -1]
    assert loss == pytest.approx(sum(-r * k * x for r, k, x in zip(ratio, keep, a)), abs=1e-6)
    assert grad == pytest.approx([-r * k * x for r, k, x in zip(ratio, keep, a)], abs=1e-6)
    assert metrics["clip_ratio"] == pytest.approx(3 / 5)
    assert metrics["divergence_mean"] == pytest.approx((0.2 + 0.1 + 0.2 + 0.2 + 0.2) / 5, abs=1e-6)


def binary_kl(mu: float, pi: float) -> float:
    return mu * math.log(mu / pi) + (1 - mu) * math.log((1 - mu) / (1 - pi))


def test_dppo_binary_kl_by_hand():
    mu = row(0.5, 0.5, 0.9, 0.9)
    pi = row(0.8, 0.6, 0.5, 0.95)
    adv = row(1.0, 1.0, -1.0, 1.0)
    lp = pi.log().requires_grad_(True)
    opts = DppoOptions(divergence="binary_kl", delta_low=0.15, delta_high=0.15)
    loss, grad, metrics = value_and_grad(dppo, lp, torch.zeros_like(mu), adv, opts, None, mu.log())
    kls = [binary_kl(0.5, 0.8), binary_kl(0.5, 0.6), binary_kl(0.9, 0.5), binary_kl(0.9, 0.95)]
    assert kls[0] > 0.15 and kls[1] < 0.15 and kls[2] > 0.15 and kls[3] < 0.15
    keep = [0, 1, 0, 1]
    ratio = [0.8 / 0.5, 0.6 / 0.5, 0.5 / 0.9, 0.95 / 0.9]
    a = [1, 1, -1, 1]
    assert grad == pytest.approx([-r * k * x for r, k, x in zip(ratio, keep, a)], abs=1e-5)
    assert loss == pytest.approx(sum(-r * k * x for r, k, x in zip(ratio, keep, a)), abs=1e-5)
    assert metrics["divergence_mean"] == pytest.approx(sum(kls) / 4, rel=1e-4)
    assert metrics["clip_ratio"] == pytest.approx(0.5)


def test_dppo_default_delta_is_the_guides_0_15():
    assert DppoOptions().delta_low == DppoOptions().delta_high == 0.15


def test_dppo_falls_back_to_old_logprobs_without_rollout_logprobs(batch):
    with_rollout, _ = dppo(batch.log_probs, batch.old_log_probs, batch.advantages, None, batch.loss_mask,
                           batch.old_log_probs)
    without, _ = dppo(batch.log_probs, batch.old_log_probs, batch.advantages, None, batch.loss_mask, None)
    assert with_rollout.item() == without.item()


# -- glm5 by hand --------------------------------------------------------------------


def test_glm5_by_hand():
    rollout = row(-1.0, -1.0, -1.0, -1.0)
    ratios = [0.9, 1.15, 1.3, 0.7]
    lp = (rollout + torch.log(row(*ratios))).detach().requires_grad_(True)
    adv = row(1.0, -2.0, 1.0, 1.0)
    loss, grad, metrics = value_and_grad(glm5, lp, torch.zeros_like(rollout), adv, None, None, rollout)
    keep = [1, 1, 0, 0]  # (0.8, 1.2) is the default window
    weights = [r * k for r, k in zip(ratios, keep)]
    lps = lp[0].tolist()
    assert loss == pytest.approx(sum(-w * a * x for w, a, x in zip(weights, adv[0].tolist(), lps)), abs=1e-5)
    # the weight is detached: d/dlogp = -w A, not -r A (1 + log pi)
    assert grad == pytest.approx([-w * a for w, a in zip(weights, adv[0].tolist())], abs=1e-6)
    assert metrics["clip_ratio"] == pytest.approx(0.5)


def test_glm5_needs_rollout_logprobs(batch):
    with pytest.raises(LossInputError, match="rollout_logprobs"):
        glm5(*batch.args(), None, batch.loss_mask, None)


def test_glm5_ignores_old_logprobs(batch):
    a, _ = glm5(*batch.args(), None, batch.loss_mask, batch.rollout_logprobs)
    b, _ = glm5(batch.log_probs, batch.old_log_probs + 5.0, batch.advantages, None, batch.loss_mask,
                batch.rollout_logprobs)
    assert a.item() == b.item()


# -- the analytic gradient equals autograd of the plain formula -----------------------


def reference(name: str, lp, old, rollout, adv, weight):
    """Each loss written plainly in float64, differentiated by autograd (an independent reference)."""
    if name == "ppo_clip":
        r = torch.exp((lp - old).clamp(-20, 20))
        return -(torch.minimum(r * adv, r.clamp(0.8, 1.2) * adv) * weight).sum()
    r = torch.exp((lp - rollout).clamp(-20, 20))
    if name == "dppo":
        gap = (lp.exp() - rollout.exp()).detach()
        keep = ~(((adv > 0) & (gap > 0.15)) | ((adv < 0) & (gap < -0.15)))
        return -(r * adv * keep * weight).sum()
    keep = (r > 0.8) & (r < 1.2)
    return -((r * keep).detach() * adv * lp * weight).sum()


@pytest.mark.parametrize("loss_fn", LOSSES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("seed", range(3))
def test_gradient_equals_autograd_of_the_plain_formula(loss_fn, seed, batches, lengths):
    b = batches(lengths(seed), seed=seed, drift=0.4)
    kw = dict(aggregation="prompt_mean", group_ids=b.group_ids, num_groups=b.num_groups)
    lp = b.leaf()
    loss, _ = loss_fn(lp, b.old_log_probs, b.advantages, None, b.loss_mask, b.rollout_logprobs, **kw)
    loss.backward()
    from tackroom_losses.aggregation import aggregation_scale

    weight = (b.loss_mask * aggregation_scale(b.loss_mask, **kw)).double()
    ref_lp = b.log_probs.double().requires_grad_(True)
    ref = reference(loss_fn.__name__, ref_lp, b.old_log_probs.double(), b.rollout_logprobs.double(),
                    b.advantages.double(), weight)
    ref.backward()
    assert loss.item() == pytest.approx(ref.item(), rel=1e-5, abs=1e-7)
    torch.testing.assert_close(lp.grad.double(), ref_lp.grad, rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("loss_fn", LOSSES, ids=lambda f: f.__name__)
def test_gradient_follows_the_incoming_gradient(loss_fn, batch):
    """A trainer scales the loss (gradient accumulation, data-parallel size): the gradient scales with it."""
    lp1, lp2 = batch.leaf(), batch.leaf()
    args = (batch.old_log_probs, batch.advantages, None, batch.loss_mask, batch.rollout_logprobs)
    loss_fn(lp1, *args)[0].backward()
    (loss_fn(lp2, *args)[0] * -2.5).backward()
    torch.testing.assert_close(lp2.grad, lp1.grad * -2.5)


@pytest.mark.parametrize("loss_fn", LOSSES, ids=lambda f: f.__name__)
def test_without_gradients(loss_fn, batch):
    """Evaluation: no gradient is formed, and the value is the same."""
    args = (batch.old_log_probs, batch.advantages, None, batch.loss_mask, batch.rollout_logprobs)
    with_grad, _ = loss_fn(batch.leaf(), *args)
    plain, _ = loss_fn(batch.log_probs.detach(), *args)
    with torch.no_grad():
        quiet, _ = loss_fn(batch.leaf(), *args)
    assert with_grad.requires_grad and not plain.requires_grad and not quiet.requires_grad
    assert with_grad.item() == plain.item() == quiet.item()


# -- masks, dtypes, extremes ---------------------------------------------------------


@pytest.mark.parametrize("loss_fn", LOSSES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_masked_tokens_have_no_effect_and_no_gradient(loss_fn, aggregation, batch):
    kw = dict(aggregation=aggregation, group_ids=batch.group_ids, num_groups=batch.num_groups)
    lp = batch.leaf()
    loss, _ = loss_fn(lp, batch.old_log_probs, batch.advantages, None, batch.loss_mask, batch.rollout_logprobs, **kw)
    loss.backward()
    padding = ~batch.loss_mask
    assert padding.any()
    assert torch.all(lp.grad[padding] == 0)
    assert torch.any(lp.grad[batch.loss_mask] != 0)
    # change everything under the mask: same loss
    junk = torch.where(padding, torch.full_like(batch.log_probs, -7.0), batch.log_probs)
    again, _ = loss_fn(junk, batch.old_log_probs, batch.advantages + padding * 3.0, None, batch.loss_mask,
                       batch.rollout_logprobs, **kw)
    assert again.item() == pytest.approx(loss.item(), rel=1e-6)


@pytest.mark.parametrize("loss_fn", LOSSES, ids=lambda f: f.__name__)
def test_no_mask_means_every_token_counts(loss_fn, batches):
    b = batches([[5, 5], [5, 5]])
    full = torch.ones_like(b.loss_mask)
    a, _ = loss_fn(*b.args(), None, None, b.rollout_logprobs, aggregation="token_mean")
    c, _ = loss_fn(*b.args(), None, full, b.rollout_logprobs, aggregation="token_mean")
    assert a.item() == c.item()


@pytest.mark.parametrize("loss_fn", LOSSES, ids=lambda f: f.__name__)
def test_bfloat16_inputs_compute_in_float32(loss_fn, batches, lengths):
    """On bf16 inputs the loss equals the float32 loss of the same (rounded) values."""
    b16 = batches(lengths(1), dtype=torch.bfloat16)
    lp16 = b16.leaf()
    lp32 = lp16.detach().float().requires_grad_(True)
    rest16 = (b16.old_log_probs, b16.advantages, None, b16.loss_mask, b16.rollout_logprobs)
    rest32 = tuple(t.float() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in rest16)
    kw = dict(aggregation="prompt_mean", group_ids=b16.group_ids, num_groups=b16.num_groups)
    loss16, m16 = loss_fn(lp16, *rest16, **kw)
    loss32, m32 = loss_fn(lp32, *rest32, **kw)
    assert loss16.dtype == torch.float32
    assert loss16.item() == pytest.approx(loss32.item(), rel=1e-6, abs=1e-8)
    loss16.backward()
    loss32.backward()
    assert lp16.grad.dtype == torch.bfloat16
    # the gradient is rounded to bf16 twice (unscaled in the forward pass, scaled in the
    # backward pass): each rounding is within 2^-8, so both within 2^-7 of the float32 gradient
    torch.testing.assert_close(lp16.grad.float(), lp32.grad, rtol=2**-7, atol=0.0)
    for key in m32:
        assert m16[key].item() == pytest.approx(m32[key].item(), rel=1e-6)


@pytest.mark.parametrize("loss_fn", LOSSES, ids=lambda f: f.__name__)
def test_extreme_log_ratios_stay_finite(loss_fn):
    lp = row(-0.01, -60.0, -0.5, grad=True)
    other = row(-80.0, -0.01, -0.5)
    loss, metrics = loss_fn(lp, other, row(1.0, -1.0, 1.0), None, None, other, aggregation="token_mean")
    loss.backward()
    assert torch.isfinite(loss) and torch.all(torch.isfinite(lp.grad))
    assert all(torch.isfinite(v) for v in metrics.values())


@pytest.mark.parametrize("loss_fn", LOSSES, ids=lambda f: f.__name__)
def test_single_token_sequence(loss_fn):
    lp = row(-0.4, grad=True)
    loss, _ = loss_fn(lp, row(-0.4), row(2.0), None, None, row(-0.4), aggregation="sequence_mean")
    loss.backward()
    # on-policy, ratio 1: the policy-gradient is -A; glm5's value also carries log pi
    assert lp.grad.item() == pytest.approx(-2.0)


# -- no host synchronisation inside a call --------------------------------------------


class RecordOps(TorchDispatchMode):
    """Records every aten op a call dispatches."""

    def __init__(self):
        super().__init__()
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("loss_fn", LOSSES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_no_scalar_reads_or_data_dependent_shapes(loss_fn, aggregation, batch):
    """No ``.item()`` (aten._local_scalar_dense) and no ``nonzero``: on a GPU either would stall the host."""
    lp = batch.leaf()
    with RecordOps() as rec:
        loss, metrics = loss_fn(lp, batch.old_log_probs, batch.advantages, None, batch.loss_mask,
                                batch.rollout_logprobs, aggregation=aggregation, group_ids=batch.group_ids,
                                num_groups=batch.num_groups)
        loss.backward()
    assert "aten._local_scalar_dense" not in rec.ops
    assert not {"aten.nonzero", "aten.masked_select", "aten.index_put_"} & rec.ops
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 for v in metrics.values())


# -- config and input errors --------------------------------------------------------


def test_config_as_a_dict(batch):
    a, _ = dppo(*batch.args(), {"delta_low": 0.05, "delta_high": 0.05}, batch.loss_mask, batch.rollout_logprobs)
    b, _ = dppo(*batch.args(), DppoOptions(delta_low=0.05, delta_high=0.05), batch.loss_mask, batch.rollout_logprobs)
    c, _ = dppo(*batch.args(), None, batch.loss_mask, batch.rollout_logprobs)
    assert a.item() == b.item() != c.item()


def test_bad_config_values_and_types_are_refused(batch):
    with pytest.raises(LossConfigError, match="delta_hgih"):
        dppo(*batch.args(), {"delta_hgih": 0.1}, batch.loss_mask)
    with pytest.raises(LossConfigError, match="binary_tv"):
        dppo(*batch.args(), {"divergence": "tv"}, batch.loss_mask)
    with pytest.raises(LossConfigError, match="not understood"):
        ppo_clip(*batch.args(), 0.2, batch.loss_mask)


def test_shape_mismatch_names_the_tensor(batch):
    with pytest.raises(LossInputError, match="advantages has shape"):
        ppo_clip(batch.log_probs, batch.old_log_probs, batch.advantages[:, :1], None, batch.loss_mask)
    with pytest.raises(LossInputError, match=r"\[batch, tokens\]"):
        ppo_clip(batch.log_probs[0], batch.old_log_probs[0], batch.advantages[0], None, batch.loss_mask[0])


def test_device_mismatch_is_refused(batch):
    with pytest.raises(LossInputError, match="is on meta"):
        ppo_clip(batch.log_probs, batch.old_log_probs.to("meta"), batch.advantages, None, batch.loss_mask)


def test_empty_batch_is_refused():
    empty = torch.zeros(0, 5)
    with pytest.raises(LossInputError, match="empty"):
        ppo_clip(empty, empty, empty)


def test_integer_log_probs_are_refused():
    ints = torch.zeros(2, 3, dtype=torch.long)
    with pytest.raises(LossInputError, match="floating point"):
        ppo_clip(ints, ints, ints)


# -- the fused path computes the same function ---------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("loss_fn", LOSSES, ids=lambda f: f.__name__)
def test_fused_equals_eager(loss_fn, batches, lengths):
    """torch.compile (Inductor's C++ backend here, Triton on GPU) gives the same values and gradients."""
    for seed in (0, 1):  # two shapes: the dynamic graph is reused, not recompiled into something else
        b = batches(lengths(seed, high=40 + 30 * seed), seed=seed)
        kw = dict(aggregation="prompt_mean", group_ids=b.group_ids, num_groups=b.num_groups)
        out = {}
        for fused in (False, True):
            lp = b.leaf()
            loss, metrics = loss_fn(lp, b.old_log_probs, b.advantages, {"fused": fused}, b.loss_mask,
                                    b.rollout_logprobs, **kw)
            loss.backward()
            out[fused] = (loss.item(), lp.grad, {k: v.item() for k, v in metrics.items()})
        assert out[True][0] == pytest.approx(out[False][0], rel=1e-5, abs=1e-7)
        assert torch.allclose(out[True][1], out[False][1], rtol=1e-5, atol=1e-8)
        assert out[True][2] == pytest.approx(out[False][2], rel=1e-5)

"""Ours against SkyRL 0.4.0's own implementation, on random ragged batches.

ppo_clip vs ``regular``, dppo vs ``dppo`` (binary TV and binary KL), glm5 vs
``rollout_is``, and each aggregation vs SkyRL's
``apply_loss_reduction_to_advantages_minibatch`` followed by its masked-sum
loss: values and gradients agree in float32. SkyRL's ppo_utils runs on CPU
tensors; Ray is imported, never started.
"""

from __future__ import annotations

import os

import pytest
import torch

import tackroom_losses
from tackroom_losses.aggregation import group_ids_from_boundaries, scale_advantages
from tackroom_losses.dppo import dppo
from tackroom_losses.errors import LossConfigError
from tackroom_losses.glm5 import glm5
from tackroom_losses.ppo_clip import ppo_clip
from tackroom_losses.skyrl_bridge import register_with_skyrl

try:
    from skyrl.backends.skyrl_train.utils import ppo_utils
    from skyrl.train.config import AlgorithmConfig
except ImportError as exc:  # pragma: no cover - the workspace's dev group installs skyrl
    if os.environ.get("CI"):
        raise
    pytest.skip(f"SkyRL is not installed ({exc}); `uv sync` installs skyrl==0.4.0 with the dev group",
                allow_module_level=True)

SEEDS = range(4)
AGGREGATIONS = ["token_mean", "sequence_mean", "prompt_mean"]

# (our function, SkyRL's registry name, SkyRL config overrides)
PAIRS = {
    "ppo_clip": (ppo_clip, "regular", {}),
    "dppo_tv": (dppo, "dppo", {"dppo": {"dppo_type": "binary_tv", "delta_low": 0.15, "delta_high": 0.15}}),
    "dppo_kl": (dppo, "dppo", {"dppo": {"dppo_type": "binary_kl", "delta_low": 0.05, "delta_high": 0.08}}),
    "glm5": (glm5, "rollout_is", {"eps_clip_low": 0.25, "eps_clip_high": 0.3}),
}


def skyrl_config(policy_loss_type: str, overrides: dict, loss_reduction: str = "token_mean") -> AlgorithmConfig:
    cfg = AlgorithmConfig(policy_loss_type=policy_loss_type, loss_reduction=loss_reduction)
    for key, value in overrides.items():
        if isinstance(value, dict):
            for sub, v in value.items():
                setattr(getattr(cfg, key), sub, v)
        else:
            setattr(cfg, key, value)
    return cfg


def run(fn, batch, config, advantages, **kw):
    lp = batch.leaf()
    loss, metrics = fn(lp, batch.old_log_probs, advantages, config, batch.loss_mask.float(), batch.rollout_logprobs,
                       **kw)
    loss.backward()
    return loss.detach(), lp.grad, metrics


@pytest.mark.parametrize("pair", PAIRS)
@pytest.mark.parametrize("seed", SEEDS)
def test_masked_sum_matches_skyrl(pair, seed, batches, lengths):
    """SkyRL's contract: advantages as given, loss = masked sum."""
    ours_fn, name, overrides = PAIRS[pair]
    b = batches(lengths(seed, groups=3, per_group=4, high=200), seed=seed)
    cfg = skyrl_config(name, overrides)
    ours = run(ours_fn, b, cfg, b.advantages)
    theirs = run(ppo_utils.PolicyLossRegistry.get(name), b, cfg, b.advantages)
    torch.testing.assert_close(ours[0], theirs[0].float(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours[1], theirs[1], rtol=1e-5, atol=1e-7)
    assert ours[2]["clip_ratio"].item() == pytest.approx(theirs[2]["clip_ratio"], abs=1e-6)


@pytest.mark.parametrize("pair", PAIRS)
@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("seed", SEEDS)
def test_aggregated_loss_matches_skyrl_loss_reduction(pair, aggregation, seed, batches, lengths):
    """Ours aggregating in the call == SkyRL scaling advantages by ``loss_reduction`` then summing."""
    ours_fn, name, overrides = PAIRS[pair]
    b = batches(lengths(seed, groups=4, per_group=3, high=300), seed=100 + seed)
    cfg = skyrl_config(name, overrides, loss_reduction=aggregation)
    batch, width = b.log_probs.shape
    scaled = ppo_utils.apply_loss_reduction_to_advantages_minibatch(
        b.advantages, b.loss_mask.float(), aggregation, micro_batch_size=batch, max_seq_len=width,
        prompt_boundaries=b.boundaries,
    )
    theirs = run(ppo_utils.PolicyLossRegistry.get(name), b, cfg, scaled)
    group_ids, num_groups = group_ids_from_boundaries(b.boundaries)
    ours = run(ours_fn, b, cfg, b.advantages, aggregation=aggregation, group_ids=group_ids, num_groups=num_groups)
    torch.testing.assert_close(ours[0], theirs[0].float(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ours[1], theirs[1], rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("seed", SEEDS)
def test_scale_advantages_matches_skyrl(aggregation, seed, batches, lengths):
    b = batches(lengths(seed, groups=5, per_group=2), seed=seed)
    mask = b.loss_mask.float()
    mask[0] = 0.0  # an all-masked sequence
    batch, width = mask.shape
    theirs = ppo_utils.apply_loss_reduction_to_advantages_minibatch(
        b.advantages, mask, aggregation, micro_batch_size=batch, max_seq_len=width, prompt_boundaries=b.boundaries)
    ours = scale_advantages(b.advantages, mask, aggregation, group_ids=b.group_ids, num_groups=b.num_groups)
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=0.0)


@pytest.mark.parametrize("pair", ["ppo_clip", "glm5", "dppo_tv"])
def test_bfloat16_ours_is_skyrl_in_float32(pair, batches, lengths):
    """The one intended difference: SkyRL forms the surrogate in bf16, we in float32.

    On bf16 inputs, ours equals SkyRL run in float32 on the same values; SkyRL
    in bf16 is off by bf16 rounding (here checked only to be close).
    """
    ours_fn, name, overrides = PAIRS[pair]
    b16 = batches(lengths(7, high=400), seed=7, dtype=torch.bfloat16)
    cfg = skyrl_config(name, overrides)
    ours = run(ours_fn, b16, cfg, b16.advantages)
    b32 = batches(lengths(7, high=400), seed=7, dtype=torch.bfloat16)
    for field in ("log_probs", "old_log_probs", "rollout_logprobs", "advantages"):
        setattr(b32, field, getattr(b32, field).float())
    reference = run(ppo_utils.PolicyLossRegistry.get(name), b32, cfg, b32.advantages)
    theirs16 = run(ppo_utils.PolicyLossRegistry.get(name), b16, cfg, b16.advantages)
    torch.testing.assert_close(ours[0], reference[0], rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(ours[1], reference[1].to(torch.bfloat16))
    assert theirs16[0].float().item() == pytest.approx(reference[0].item(), rel=5e-2, abs=0.5)


def test_our_losses_run_from_skyrls_registry(batch):
    """The trainer's route: register into PolicyLossRegistry, SkyRL calls with its own config."""
    registry = ppo_utils.PolicyLossRegistry
    names = register_with_skyrl(registry, tackroom_losses.SPECS)
    try:
        assert names == ["tackroom_ppo_clip", "tackroom_dppo", "tackroom_glm5"]
        assert "dppo" in registry.list_available()  # SkyRL's own dppo stays
        cfg = skyrl_config("tackroom_dppo", {"dppo": {"delta_low": 0.1, "delta_high": 0.1}})
        via_registry = run(registry.get("tackroom_dppo"), batch, cfg, batch.advantages)
        direct = run(dppo, batch, {"delta_low": 0.1, "delta_high": 0.1}, batch.advantages)
        assert via_registry[0].item() == direct[0].item()
        assert isinstance(via_registry[2]["clip_ratio"], float)  # SkyRL's reduce_metrics keeps only numbers
        assert via_registry[2]["clip_ratio"] == pytest.approx(direct[2]["clip_ratio"].item())
        # registering again (a trainer restarted in-process) replaces, it does not raise
        register_with_skyrl(registry, tackroom_losses.SPECS)
    finally:
        for name in names:
            registry.unregister(name)


def test_skyrl_off_policy_correction_is_refused_not_ignored(batch):
    cfg = skyrl_config("regular", {})
    cfg.off_policy_correction.tis_ratio_type = "token"
    with pytest.raises(LossConfigError, match="tis_ratio_type"):
        ppo_clip(*batch.args(), cfg, batch.loss_mask, batch.rollout_logprobs)


def test_skyrl_config_fields_map_onto_our_options():
    cfg = skyrl_config("dppo", {"dppo": {"dppo_type": "binary_kl", "delta_low": 0.05, "delta_high": 0.3}},
                       loss_reduction="prompt_mean")
    options = tackroom_losses.DppoOptions.from_config(cfg)
    assert (options.divergence, options.delta_low, options.delta_high) == ("binary_kl", 0.05, 0.3)
    assert options.aggregation == "prompt_mean"
    ppo = tackroom_losses.PpoClipOptions.from_config(skyrl_config("regular", {"eps_clip_low": 0.1,
                                                                               "eps_clip_high": 0.28}))
    assert (ppo.eps_clip_low, ppo.eps_clip_high) == (0.1, 0.28)

"""The warm start's Tinker data: masked tokens carry weight 0 and no loss factor, and SkyRL 0.4's JAX server, reducing
the datums as it does (``skyrl/backends/jax.py``: per sequence Σ_t ℓ_t / Σ_t w_t, then the mean over sequences),
minimises exactly the mean NLL over the batch's trained tokens, where ``cross_entropy`` with the same weights would
minimise the mean over sequences. The same against the real server: test_sft_tinker.py."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pytest

from tackroom_train.sft import Example
from tackroom_train.tinker.datums import reduced_loss
from tackroom_train.tinker.sft import SFT_LOSS_CONFIG, forward_datums, sft_datums, trained_nll

# a prompt (masked), an answer; a multi-turn row whose tool result between two turns is masked; a short answer
BATCH = [
    Example(ids=[1, 10, 11, 12, 20, 21, 2], mask=[0, 0, 0, 0, 1, 1, 1], task_id="a"),
    Example(ids=[1, 10, 30, 31, 2, 40, 41, 42, 50, 2], mask=[0, 0, 1, 1, 1, 0, 0, 0, 1, 1], task_id="b"),
    Example(ids=[1, 13, 60], mask=[0, 0, 1], task_id="c"),
]


def test_masked_tokens_carry_weight_and_loss_factor_zero() -> None:
    for ex, datum in zip(BATCH, sft_datums(BATCH), strict=True):
        inputs = {k: list(v.data) for k, v in datum.loss_fn_inputs.items()}
        assert datum.model_input.to_ints() == ex.ids[:-1] and inputs["target_tokens"] == ex.ids[1:]
        assert inputs["weights"] == [float(m) for m in ex.mask[1:]]
        for m, w, a in zip(ex.mask[1:], inputs["weights"], inputs["advantages"], strict=True):
            assert (w == 0.0 and a == 0.0) if not m else (w == 1.0 and a > 0.0)
    for ex, datum in zip(BATCH, forward_datums(BATCH), strict=True):
        assert list(datum.loss_fn_inputs["weights"].data) == [float(m) for m in ex.mask[1:]]


def server_outputs(data: list, logprobs: list[list[float]], loss_fn: str) -> list[dict]:
    """SkyRL's JAX per-token losses (``skyrl/tinker/loss_fns.py``, masked by the weights): cross_entropy
    ``−w·logp``; cispo ``−w·clip(ratio, lo, hi)·A·logp`` with the ratio clipped to [1, 1] by our config."""
    out = []
    for datum, lp in zip(data, logprobs):
        w = list(datum.loss_fn_inputs["weights"].data)
        if loss_fn == "cross_entropy":
            losses = [-wi * x for wi, x in zip(w, lp)]
        else:
            a = list(datum.loss_fn_inputs["advantages"].data)
            clip = SFT_LOSS_CONFIG["clip_low_threshold"]
            losses = [-wi * clip * ai * x for wi, ai, x in zip(w, a, lp)]
        out.append({"elementwise_loss": SimpleNamespace(data=losses)})
    return out


def test_the_servers_reduction_of_the_datums_is_the_token_mean_of_the_trained_tokens() -> None:
    rng = random.Random(3)
    logprobs = [[-rng.uniform(0.1, 6.0) for _ in ex.ids[1:]] for ex in BATCH]
    total, tokens = trained_nll(BATCH, logprobs)
    assert tokens == 3 + 5 + 1
    token_mean = total / tokens
    data = sft_datums(BATCH)
    assert reduced_loss(data, server_outputs(data, logprobs, "cispo")) == pytest.approx(token_mean)
    # every token, masked ones too, would be another number: the prompt's and the tool result's NLL
    everything = sum(-x for lp in logprobs for x in lp) / sum(len(lp) for lp in logprobs)
    assert not math.isclose(everything, token_mean, rel_tol=1e-3)
    # what Tinker's cross_entropy with weights = mask gives on this server: the mean over sequences, not tokens
    per_sequence = [trained_nll([ex], [lp]) for ex, lp in zip(BATCH, logprobs)]
    sequence_mean = sum(s / n for s, n in per_sequence) / len(BATCH)
    assert reduced_loss(data, server_outputs(data, logprobs, "cross_entropy")) == pytest.approx(sequence_mean)
    assert not math.isclose(sequence_mean, token_mean, rel_tol=1e-3)

"""``[train] tis_ratio_type``: truncated importance sampling on the trainer/sampler ratio (SkyRL's semantics),
on a crafted batch whose ratios are known, and how it reaches the Tinker datums."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from tackroom_train.config import TrainConfig
from tackroom_train.tinker.datums import batch_from_output, datums, tis_ratios

TASKS = str(Path(__file__).resolve().parents[3] / "examples" / "train" / "overfit-tasks")

# two rows: prompt [1, 2] then 3 sampled tokens (the last one masked), prompt [5] then 2 sampled tokens
OUT = {"prompt_token_ids": [[1, 2], [5]], "response_ids": [[7, 8, 9], [6, 6]], "loss_masks": [[1, 1, 0], [1, 1]],
       "rollout_logprobs": [[-1.0, -2.0, -3.0], [-0.5, -0.5]]}
# trainer logprobs over target positions (row 0: the response starts at position 1; row 1 at 0)
TRAINER = [[9.0, -1.0 + math.log(3.0), -2.0 + math.log(0.5), -3.0 + 5.0], [-0.5 + math.log(1.5), -0.5 + math.log(4.0)]]


def _batch():
    return batch_from_output(OUT, [1.0, -1.0], ["a", "a"], "token_mean")


def test_token_tis_is_the_capped_per_token_ratio() -> None:
    ratios, metrics = tis_ratios(_batch(), TRAINER, "token", token_cap=2.0)
    # row 0: ratios 3 (capped to 2), 0.5, e^5 (masked, capped too; it multiplies a zero advantage)
    assert ratios[0] == pytest.approx([2.0, 0.5, 2.0])
    assert ratios[1] == pytest.approx([1.5, 2.0])
    assert metrics["tis_token_clip_high_ratio"] == pytest.approx(2 / 4)  # 3 and 4 capped among 4 trained tokens
    # SkyRL's own function gives the same on the same tensors
    from omegaconf import OmegaConf
    from skyrl.backends.skyrl_train.utils.off_policy_correction_utils import compute_tis_ratio

    old = torch.tensor([TRAINER[0][1:4]])
    rollout = torch.tensor([OUT["rollout_logprobs"][0]])
    cfg = OmegaConf.create({"token_tis_ratio_clip_high": 2.0, "sequence_tis_ratio_clip_high": 5.0})
    theirs, _ = compute_tis_ratio(old, rollout, torch.tensor([[1.0, 1.0, 0.0]]), "token", cfg)
    assert theirs[0].tolist() == pytest.approx(ratios[0])


def test_sequence_tis_is_the_capped_product_over_trained_tokens() -> None:
    ratios, metrics = tis_ratios(_batch(), TRAINER, "sequence", sequence_cap=5.0)
    assert ratios[0] == pytest.approx([1.5] * 3)  # 3 × 0.5; the masked token's e^5 does not count
    assert ratios[1] == pytest.approx([5.0] * 2)  # 1.5 × 4 = 6, capped at 5
    assert metrics["tis_seq_clip_high_ratio"] == pytest.approx(1 / 2)
    with pytest.raises(ValueError, match="'token' or 'sequence'"):
        tis_ratios(_batch(), TRAINER, "tokens")


def test_tis_weights_the_advantages_and_the_trainer_is_the_reference() -> None:
    batch = _batch()
    ratios, _ = tis_ratios(batch, TRAINER, "token", token_cap=2.0)
    plain = datums(batch, with_advantages=True)
    corrected = datums(batch, with_advantages=True, old_logprobs=TRAINER, token_weights=ratios)
    for p, c, r, row in zip(plain, corrected, ratios, batch.rows):
        pad = row.start
        pa, ca = list(p.loss_fn_inputs["advantages"].data), list(c.loss_fn_inputs["advantages"].data)
        assert ca[pad:] == pytest.approx([a * w for a, w in zip(pa[pad:], r)])
        assert ca[:pad] == [0.0] * pad
    # the loss's ratio is taken against the trainer's logprobs, not the sampler's
    assert list(corrected[0].loss_fn_inputs["logprobs"].data)[1:] == pytest.approx(TRAINER[0][1:4])
    assert list(plain[0].loss_fn_inputs["logprobs"].data)[1:] == pytest.approx(OUT["rollout_logprobs"][0])


def test_tis_config_switch_and_its_skyrl_mapping(tmp_path) -> None:
    from tackroom_train.plan import resolve_plan
    from tackroom_train.skyrl_config import build_skyrl_config, skyrl_overrides

    plain = TrainConfig(tasks=[TASKS], model={"path": "m"})
    assert plain.train.tis_ratio_type is None
    assert not any("off_policy" in k for k in skyrl_overrides(resolve_plan(plain), dataset_path=tmp_path / "d",
                                                              run_dir=tmp_path))
    config = TrainConfig(tasks=[TASKS], model={"path": "m"},
                         train={"tis_ratio_type": "sequence", "sequence_tis_ratio_clip_high": 3})
    overrides = skyrl_overrides(resolve_plan(config), dataset_path=tmp_path / "d", run_dir=tmp_path)
    typed = build_skyrl_config(overrides).trainer.algorithm.off_policy_correction
    assert (typed.tis_ratio_type, typed.sequence_tis_ratio_clip_high) == ("sequence", 3)
    with pytest.raises(ValueError, match="token"):
        TrainConfig(model={"path": "m"}, train={"tis_ratio_type": "both"})

"""The mismatch warning's threshold in effect: engine sampling has its own default (two bf16 kernel stacks)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tackroom_train.config import TrainKnobs, load_train_config
from tackroom_train.mismatch import ENGINE_MISMATCH_WARN, mismatch_threshold, mismatch_warning

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def test_engine_sampling_defaults_to_the_engine_threshold_unless_set() -> None:
    assert mismatch_threshold(TrainKnobs(), on_engine=True) == ENGINE_MISMATCH_WARN == 0.1
    assert mismatch_threshold(TrainKnobs(), on_engine=False) == 0.03
    # set in the file, even to the old default, it is what counts
    assert mismatch_threshold(TrainKnobs(logprob_mismatch_warn=0.03), on_engine=True) == 0.03
    assert mismatch_threshold(TrainKnobs(logprob_mismatch_warn=0.5), on_engine=False) == 0.5


def test_the_measured_same_version_floor_does_not_warn_on_the_engine_but_a_wrong_policy_does() -> None:
    threshold = mismatch_threshold(TrainKnobs(), on_engine=True)
    for floor in (0.030, 0.048, 0.075):  # version 0 (LoRA B = 0): vLLM CPU vs XLA, both bf16
        assert mismatch_warning(floor, threshold) is None
    assert mismatch_warning(0.5, threshold) is not None


@pytest.mark.parametrize("name", ["terminus.toml", "archipelago.toml"])
def test_the_multiturn_examples_sample_on_the_engine_with_the_engine_threshold(name: str) -> None:
    config = load_train_config(EXAMPLES / "train" / name)
    assert config.tinker.sampler == "engine"
    assert mismatch_threshold(config.train, on_engine=True) == ENGINE_MISMATCH_WARN


@pytest.mark.parametrize("sampler,given,wanted", [("engine", None, 0.1), ("engine", 0.03, 0.03), ("tinker", None, 0.03)])
def test_a_run_puts_the_threshold_in_effect_into_its_config(tmp_path: Path, sampler: str, given: float | None,
                                                             wanted: float) -> None:
    """run_tinker writes the threshold back before anything starts (the model check fails first here)."""
    from tackroom import ConfigError
    from tackroom_train.config import TrainConfig
    from tackroom_train.tinker.loop import run_tinker

    train = {} if given is None else {"logprob_mismatch_warn": given}
    config = TrainConfig.model_validate({"tasks": [str(EXAMPLES / "train" / "overfit-tasks")],
                                         "model": {"path": str(tmp_path / "missing")}, "train": train,
                                         "backend": "tinker", "tinker": {"sampler": sampler}})
    with pytest.raises(ConfigError, match="local HF folder"):
        asyncio.run(run_tinker(config, tmp_path / "run", log=lambda s: None))
    assert config.train.logprob_mismatch_warn == wanted

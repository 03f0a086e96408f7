"""A loss from another distribution trains on both backends through its own ``LossSpec.mappings``: the trainer keeps
no table of loss names. The loss is declared here (not tackroom-losses'), registered on a plugin manager like any
plugin, and followed through the Tinker backend's ``auto`` path (the built-in and config its mapping names reach
the server's forward-backward) and SkyRL's config path (its options reach the function SkyRL calls, as
``AlgorithmConfig`` fields). A loss without the mapping a backend needs is refused naming the loss, the backend and
what to set."""

from __future__ import annotations

import asyncio
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from pydantic import Field
from skyrl.train.generators.base import TrajectoryID

import tackroom
from tackroom_app import PluginManager
from tackroom_train.config import TrainConfig
from tackroom_train.plan import LossMappingError, resolve_plan
from tackroom_train.skyrl_config import build_skyrl_config, skyrl_overrides
from tackroom_train.tinker.pipeline import Sampled
from tackroom_train.tinker.rollouts import RolloutBatch
from tackroom_train.tinker.step_trainer import BuiltinLoss, LossChoice, StepTrainer, loss_path

TASKS = str(Path(__file__).resolve().parents[3] / "examples" / "train" / "overfit-tasks")


class ClippedReinforceOptions(tackroom.PluginOptions):
    clip: float = Field(default=0.2, gt=0)
    aggregation: tackroom.Aggregation = "sequence_mean"


def clipped_reinforce(log_probs, old_log_probs, advantages, config, loss_mask=None, rollout_logprobs=None):
    """-A log pi, masked and summed; reports the clip it was given (an options object, or SkyRL's config)."""
    mask = torch.ones_like(log_probs) if loss_mask is None else loss_mask.to(log_probs.dtype)
    clip = config.clip if isinstance(config, ClippedReinforceOptions) else config.eps_clip_high
    return -(advantages * log_probs * mask).sum(), {"clip": torch.tensor(float(clip))}


def on_tinker(options: ClippedReinforceOptions) -> tuple[str, dict[str, float]]:
    return "ppo", {"clip_low_threshold": 1.0 - options.clip, "clip_high_threshold": 1.0 + options.clip}


def on_skyrl(options: ClippedReinforceOptions) -> dict[str, float]:
    return {"eps_clip_high": options.clip}


MAPPED = tackroom.LossSpec(name="clipped_reinforce", fn=clipped_reinforce, aggregation="token_mean",
                           Options=ClippedReinforceOptions, mappings={"tinker": on_tinker, "skyrl": on_skyrl})
UNMAPPED = tackroom.LossSpec(name="bare_reinforce", fn=clipped_reinforce, Options=ClippedReinforceOptions)


@pytest.fixture
def manager() -> PluginManager:
    """The installed plugins and a third-party distribution that registers the two losses above."""
    manager = PluginManager()
    plugin = types.ModuleType("tackroom_reinforce")
    plugin.tackroom_losses = tackroom.hookimpl(lambda register: [register.add_loss(MAPPED),
                                                                 register.add_loss(UNMAPPED)])
    manager.register(plugin, distribution="tackroom-reinforce")
    return manager


def _config(backend: str, loss: str = "clipped_reinforce", options: dict | None = None) -> TrainConfig:
    return TrainConfig.model_validate({"tasks": [TASKS], "model": {"path": "m"}, "backend": backend,
                                       "loss": {"name": loss, "options": options or {}}})


class RecordingClient:
    """Stands in for the Tinker training client (a real server trains for minutes: test_tinker_overfit.py) and
    records what each call asked the server for; its logprobs are the rollout's (on-policy)."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    async def forward_backward(self, data, loss_fn, loss_fn_config, what):
        self.calls.append(("forward_backward", loss_fn, loss_fn_config))
        return SimpleNamespace(loss_fn_outputs=[
            {"elementwise_loss": SimpleNamespace(data=[0.0] * len(d.loss_fn_inputs["weights"].data)),
             "logprobs": SimpleNamespace(data=list(d.loss_fn_inputs["logprobs"].data))} for d in data])

    @staticmethod
    def logprobs(result) -> list[list[float]]:
        return [list(o["logprobs"].data) for o in result.loss_fn_outputs]

    async def optim_step(self, learning_rate, what) -> None:
        self.calls.append(("optim_step", learning_rate))


def _rollout() -> RolloutBatch:
    ids = [TrajectoryID(instance_id="a", repetition_id=k) for k in range(2)]
    return RolloutBatch(ids, {"prompt_token_ids": [[1, 2, 3]] * 2, "response_ids": [[4, 5]] * 2,
                              "loss_masks": [[1, 1]] * 2, "rollout_logprobs": [[-0.5, -0.5]] * 2,
                              "rewards": [1.0, 0.0], "rollout_metrics": {}})


def test_on_tinker_auto_runs_the_builtin_its_mapping_names(manager: PluginManager) -> None:
    plan = resolve_plan(_config("tinker", options={"clip": 0.3}), manager=manager)
    assert (plan.loss.name, plan.loss.aggregation) == ("clipped_reinforce", "sequence_mean")  # the options' field
    choice = LossChoice.choose(plan.loss, plan.tinker.loss_fn)
    assert plan.tinker.loss_fn == "auto" and choice.loss_fn == "ppo"
    assert choice.loss_fn_config == {"clip_low_threshold": pytest.approx(0.7), "clip_high_threshold": pytest.approx(1.3)}
    client = RecordingClient()
    path = loss_path(choice, plan.train, client, micro_batch=0)  # type: ignore[arg-type]
    assert type(path) is BuiltinLoss
    trainer = StepTrainer(client, path, aggregation=choice.aggregation, learning_rate=1e-3,  # type: ignore[arg-type]
                          normalize_advantages=True, micro_batch=0)
    changed, record = asyncio.run(trainer.train(Sampled(1, 0, _rollout(), 0.1), step=1, staleness=0))
    assert changed and record.trained_trials == 2 and record.mismatch_mean == 0.0
    assert client.calls == [("forward_backward", "ppo", choice.loss_fn_config), ("optim_step", 1e-3)]


def test_on_skyrl_its_options_reach_the_function_skyrl_calls(manager: PluginManager, tmp_path: Path) -> None:
    from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry

    from tackroom_train.losses import register_losses

    plan = resolve_plan(_config("skyrl", options={"clip": 0.3}), manager=manager)
    overrides = skyrl_overrides(plan, dataset_path=tmp_path / "p.jsonl", run_dir=tmp_path)
    assert overrides["trainer.algorithm.policy_loss_type"] == "tackroom_clipped_reinforce"
    assert overrides["trainer.algorithm.loss_reduction"] == "sequence_mean"
    assert overrides["trainer.algorithm.eps_clip_high"] == 0.3
    algorithm = build_skyrl_config(overrides).trainer.algorithm
    assert "tackroom_clipped_reinforce" in register_losses(PolicyLossRegistry, manager)
    try:
        logp = torch.zeros(1, 3, requires_grad=True)
        loss, metrics = PolicyLossRegistry.get(algorithm.policy_loss_type)(logp, logp.detach(), torch.ones(1, 3),
                                                                           algorithm, torch.ones(1, 3))
    finally:
        PolicyLossRegistry.unregister("tackroom_clipped_reinforce")
        PolicyLossRegistry.unregister("tackroom_bare_reinforce")
    assert metrics == {"clip": pytest.approx(0.3)} and loss.item() == 0.0


def test_a_loss_without_the_backends_mapping_is_refused_naming_what_to_set(manager: PluginManager,
                                                                           tmp_path: Path) -> None:
    plan = resolve_plan(_config("tinker", loss="bare_reinforce"), manager=manager)
    with pytest.raises(LossMappingError) as err:
        LossChoice.choose(plan.loss, "auto")
    message = str(err.value)
    assert "'bare_reinforce'" in message and "tinker backend" in message and "[tinker] loss_fn" in message
    assert LossChoice.choose(plan.loss, "importance_sampling").loss_fn == "importance_sampling"  # a built-in by name

    # SkyRL calls the function itself: without a mapping, options it would drop are refused, defaults train
    plan = resolve_plan(_config("skyrl", loss="bare_reinforce", options={"clip": 0.5}), manager=manager)
    with pytest.raises(LossMappingError) as err:
        skyrl_overrides(plan, dataset_path=tmp_path / "p.jsonl", run_dir=tmp_path)
    message = str(err.value)
    assert "'bare_reinforce'" in message and "skyrl backend" in message and "[loss.options] clip" in message
    plan = resolve_plan(_config("skyrl", loss="bare_reinforce"), manager=manager)
    overrides = skyrl_overrides(plan, dataset_path=tmp_path / "p.jsonl", run_dir=tmp_path)
    assert overrides["trainer.algorithm.policy_loss_type"] == "tackroom_bare_reinforce"
    assert not any(k.startswith("trainer.algorithm.eps_clip") for k in overrides)


def test_a_mapping_may_be_a_reference_imported_when_asked() -> None:
    """Like ``fn``, a mapping may be a ``"module:function"`` string, so declaring it imports nothing."""
    from tackroom_losses.mappings import ppo_on_tinker

    spec = tackroom.LossSpec(name="by_reference", fn=clipped_reinforce,
                             mappings={"tinker": "tackroom_losses.mappings:ppo_on_tinker"})
    assert spec.mapping("tinker") is ppo_on_tinker and spec.mapping("skyrl") is None
    with pytest.raises(ValueError, match="mappings reference 'ppo_on_tinker' must look like 'package.module:function'"):
        tackroom.LossSpec(name="by_reference", fn=clipped_reinforce, mappings={"tinker": "ppo_on_tinker"})

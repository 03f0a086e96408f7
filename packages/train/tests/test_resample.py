"""Groups without learning signal are sampled again (``[train] resample_rounds``), counted, and capped: a scripted
generator stands in for the harness and the sampler, the rest (Rollouts, the combined batch, StepTrainer's
decision, the step record, RunLog's line) is the loop's own."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tackroom_train.tinker.client import TrainingClient
from tackroom_train.tinker.pipeline import Sampled, Trained
from tackroom_train.tinker.rollouts import Rollouts, merge_metrics, task_batches
from tackroom_train.tinker.run_log import RunLog
from tackroom_train.tinker.server import TinkerCalls, TinkerSettings
from tackroom_train.tinker.step_trainer import BuiltinLoss, StepTrainer

TASKS = [{"task_id": t, "task_path": f"/tasks/{t}", "prompt": [{"role": "user", "content": t}],
          "env_class": "tackroom"} for t in "abc"]


class ScriptedGenerator:
    """Rewards by task and call: ``script(call, task, repetition) -> reward``; records every call's tasks."""

    def __init__(self, script: Any) -> None:
        self.script = script
        self.calls: list[list[str]] = []

    async def generate(self, batch: dict[str, Any]) -> dict[str, Any]:
        ids = batch["trajectory_ids"]
        self.calls.append(sorted({t.instance_id for t in ids}))
        call = len(self.calls)
        rewards = [float(self.script(call, t.instance_id, t.repetition_id)) for t in ids]
        return {"prompt_token_ids": [[1, 2] for _ in ids], "response_ids": [[3, call] for _ in ids],
                "loss_masks": [[1, 1] for _ in ids], "rollout_logprobs": [[-0.1, -0.2] for _ in ids],
                "rewards": rewards, "stop_reasons": ["stop" for _ in ids], "trajectory_ids": list(ids),
                "trajectory_generation_times": [1.0 for _ in ids],
                "rollout_metrics": {"tackroom/trials": len(ids), "tackroom/errors_model": 0,
                                    "tackroom/episode/turns": float(call)}}


class PinnedSampler:
    def __init__(self) -> None:
        self.pinned: list[int] = []
        self.checks = 0

    def pin(self, version: int) -> None:
        self.pinned.append(version)

    async def check(self, what: str) -> None:
        self.checks += 1


def _rollouts(script: Any, rounds: int) -> tuple[Rollouts, ScriptedGenerator, PinnedSampler]:
    generator, sampler = ScriptedGenerator(script), PinnedSampler()
    return Rollouts(generator, sampler, task_batches(TASKS, 3, seed=1), samples_per_prompt=2,  # type: ignore[arg-type]
                    temperature=1.0, max_generate_length=8, resample_rounds=rounds), generator, sampler


def _trainer() -> StepTrainer:
    client = TrainingClient(None, TinkerCalls(TinkerSettings()))  # no call reaches it on a step without signal
    return StepTrainer(client, BuiltinLoss(client, "importance_sampling", None, micro_batch=0),
                       aggregation="token_mean", learning_rate=1e-3, normalize_advantages=True, micro_batch=0)


def test_all_rewards_equal_resamples_up_to_the_cap_then_trains_nothing(tmp_path: Path) -> None:
    rollouts, generator, sampler = _rollouts(lambda call, task, k: 1.0, rounds=2)
    batch = asyncio.run(rollouts(1, 4))
    assert len(generator.calls) == 3  # the first batch and two rounds: the cap holds
    assert sampler.pinned == [4] and sampler.checks == 3  # one version for every round, each checked
    assert (batch.no_signal_groups, batch.resampled_groups) == (9, 6)
    assert len(batch.group_rows()) == 3 and len(batch.ids) == 6  # the step keeps mini_batch_size groups

    trainer = _trainer()
    trainer.probe = _no_probe  # type: ignore[method-assign]
    changed, record = asyncio.run(trainer.train(Sampled(1, 4, batch, 1.0), step=1, staleness=0))
    assert not changed and record.no_signal_trials == 6 and record.loss is None
    assert (record.no_signal_groups, record.resampled_groups) == (9, 6)
    lines: list[str] = []
    RunLog(tmp_path, steps_total=1, max_staleness=0, mismatch_warn=0.1, log=lines.append).step(
        Trained(Sampled(1, 4, batch, 1.0), step=1, staleness=0), record)
    assert "9 group(s) without signal, 6 more sampled in their place" in lines[0]
    assert "no learning signal" in lines[0]


async def _no_probe(batch: Any, step: int) -> Any:
    from tackroom_train.tinker.step_trainer import LossOutcome

    return LossOutcome(None, batch.subset([]), [])


def test_groups_with_signal_from_a_later_round_fill_the_step() -> None:
    # call 1: every task all-equal; call 2 (the resample round): task rewards differ by repetition
    rollouts, generator, _ = _rollouts(lambda call, task, k: 0.0 if call == 1 else float(k), rounds=2)
    batch = asyncio.run(rollouts(2, 0))
    assert len(generator.calls) == 2  # round 2 gave every missing group its signal: no third draw
    assert len(batch.signal_groups()) == 3 and batch.resampled_groups == 3 and batch.no_signal_groups == 3
    assert batch.output["rewards"] == [0.0, 1.0] * 3
    assert [r[1] for r in batch.output["response_ids"]] == [2] * 6  # every row is the second call's
    assert sorted(set(batch.task_ids)) == ["a", "b", "c"]
    assert batch.output["rollout_metrics"]["tackroom/trials"] == 12
    assert batch.output["rollout_metrics"]["tackroom/episode/turns"] == pytest.approx(1.5)
    assert _trainer().batch(batch).has_signal


def test_a_task_drawn_twice_in_one_step_is_two_groups() -> None:
    # task a has signal in call 1; b, c do not; call 2 draws from the next epoch (a task may repeat)
    def script(call: int, task: str, k: int) -> float:
        return float(k) if task == "a" or call == 2 else 0.5

    rollouts, generator, _ = _rollouts(script, rounds=1)
    batch = asyncio.run(rollouts(1, 0))
    assert len(generator.calls) == 2 and len(generator.calls[1]) == 2
    groups = batch.group_rows()
    assert len(groups) == 3 and len(batch.signal_groups()) == 3
    assert len(set(batch.groups)) == 3 and len(batch.task_ids) == 6


def test_resampling_off_keeps_the_first_batch() -> None:
    rollouts, generator, _ = _rollouts(lambda call, task, k: 1.0, rounds=0)
    batch = asyncio.run(rollouts(1, 0))
    assert len(generator.calls) == 1 and batch.resampled_groups == 0


def test_merged_metrics_sum_counts_and_weight_means() -> None:
    merged = merge_metrics([{"tackroom/trials": 6, "tackroom/mean_raw_reward": 1.0, "x": 2, "v_min": 3, "v_max": 3},
                            {"tackroom/trials": 2, "tackroom/mean_raw_reward": 0.0, "y": 0.5, "v_min": 2, "v_max": 4}])
    assert merged == {"tackroom/trials": 8, "tackroom/mean_raw_reward": 0.75, "x": 2, "y": 0.5, "v_min": 2, "v_max": 4}

"""The Tinker loop's parts without a server: the loss path chosen once per run (and the combination refused),
a step without any trained row, and what :class:`RunLog` writes (``steps.jsonl``, ``trajectories.jsonl``, the
curve) from typed records. The whole loop against a real server: test_tinker_overfit.py."""

from __future__ import annotations

import asyncio
import csv
import json
from pathlib import Path

import pytest
from skyrl.train.generators.base import TrajectoryID

from tackroom import ConfigError
from tackroom_train.config import TrainConfig
from tackroom_train.plan import resolve_loss
from tackroom_train.tinker import curve
from tackroom_train.tinker.client import TrainingClient
from tackroom_train.tinker.pipeline import Sampled, Trained
from tackroom_train.tinker.records import StepRecord
from tackroom_train.tinker.rollouts import RolloutBatch, task_batches
from tackroom_train.tinker.run_log import RunLog
from tackroom_train.tinker.server import TinkerCalls, TinkerSettings
from tackroom_train.tinker.step_trainer import (
    BuiltinLoss,
    CorrectedBuiltinLoss,
    CustomLoss,
    LossChoice,
    StepTrainer,
    loss_path,
)


def _config(loss: dict, tinker: dict | None = None, train: dict | None = None) -> TrainConfig:
    return TrainConfig.model_validate({"tasks": ["x"], "model": {"path": "m"}, "loss": loss,
                                       "tinker": tinker or {}, "train": train or {}})


def _client() -> TrainingClient:
    """A client no call reaches: choosing a loss path or training a batch without trained rows makes none."""
    return TrainingClient(None, TinkerCalls(TinkerSettings()))


@pytest.mark.parametrize("loss,tinker,train,path,loss_fn", [
    ({"name": "dppo"}, {}, {}, BuiltinLoss, "importance_sampling"),
    ({"name": "ppo_clip"}, {}, {"tis_ratio_type": "token"}, CorrectedBuiltinLoss, "ppo"),
    ({"name": "glm5"}, {"loss_fn": "cispo"}, {}, BuiltinLoss, "cispo"),
    ({"name": "dppo"}, {"loss_fn": "tackroom"}, {}, CustomLoss, "tackroom"),
])
def test_the_loss_path_is_chosen_once_from_the_config(loss, tinker, train, path, loss_fn) -> None:
    config = _config(loss, tinker, train)
    choice = LossChoice.choose(resolve_loss(config.loss), config.tinker.loss_fn)
    chosen = loss_path(choice, config.train, _client(), micro_batch=2)
    assert type(chosen) is path and choice.loss_fn == loss_fn
    assert choice.describe().startswith(f"{loss['name']}, {choice.aggregation} (")
    if loss["name"] == "ppo_clip":
        assert choice.loss_fn_config == {"clip_low_threshold": pytest.approx(0.8), "clip_high_threshold": pytest.approx(1.2)}


def test_off_policy_correction_with_the_custom_loss_is_refused_with_the_fix() -> None:
    config = _config({"name": "dppo"}, {"loss_fn": "tackroom"}, {"tis_ratio_type": "sequence"})
    with pytest.raises(ConfigError, match="tis_ratio_type applies to Tinker's built-in losses.*loss_fn = 'auto'"):
        loss_path(LossChoice.choose(resolve_loss(config.loss), config.tinker.loss_fn), config.train, _client(),
                  micro_batch=0)


def _rollout(rewards: list[float], masks: list[list[int]], tasks: list[str]) -> RolloutBatch:
    ids = [TrajectoryID(instance_id=t, repetition_id=k) for k, t in enumerate(tasks)]
    output = {"prompt_token_ids": [[1, 2, 3] for _ in rewards], "response_ids": [[4, 5] for _ in rewards],
              "loss_masks": masks, "rollout_logprobs": [[-0.5, -0.5] for _ in rewards], "rewards": rewards,
              "rollout_metrics": {"tackroom/trials": len(rewards)}}
    return RolloutBatch(ids, output)


def test_a_batch_with_every_row_masked_trains_nothing_and_calls_no_server() -> None:
    rollout = _rollout([0.0, 1.0], [[0, 0], [0, 0]], ["a", "a"])
    trainer = StepTrainer(_client(), BuiltinLoss(_client(), "importance_sampling", None, micro_batch=0),
                          aggregation="token_mean", learning_rate=1e-3, normalize_advantages=True, micro_batch=0)
    changed, record = asyncio.run(trainer.train(Sampled(3, 1, rollout, 0.5), step=2, staleness=1))
    assert not changed
    assert (record.step, record.batch, record.version, record.staleness) == (2, 3, 1, 1)
    assert record.masked_trials == 2 and record.trained_trials == record.no_signal_trials == 0
    assert record.loss is None and record.mismatch_mean is None and record.reward_per_task == {"a": 0.5}


def test_task_batches_shuffle_every_epoch_and_repeat() -> None:
    rows = [{"task_id": t} for t in "abcde"]
    batches = task_batches(rows, 2, seed=7)
    first = [next(batches) for _ in range(3)]
    assert [len(b) for b in first] == [2, 2, 1]
    assert sorted(r["task_id"] for b in first for r in b) == list("abcde")
    assert sorted(r["task_id"] for b in (next(batches) for _ in range(3)) for r in b) == list("abcde")


def test_the_run_log_writes_steps_trajectories_and_the_curve(tmp_path: Path) -> None:
    lines: list[str] = []
    log = RunLog(tmp_path, steps_total=2, max_staleness=1, mismatch_warn=0.03, log=lines.append)
    first = _rollout([1.0, 0.0, 0.5, 0.5], [[1, 1], [1, 1], [0, 0], [1, 0]], ["a", "a", "b", "b"])
    log.step(Trained(Sampled(1, 0, first, 4.0), step=1, staleness=0, changed=True, handoff_s=1.5, train_s=9.0),
             StepRecord(step=1, batch=1, version=0, staleness=0, mean_reward=0.5,
                        reward_per_task={"a": 0.5, "b": 0.5}, trained_trials=3, masked_trials=1,
                        mismatch_mean=0.2, mismatch_max=0.9, loss=0.1, sent_rows=2,
                        loss_metrics={"tis_token_clip_high_ratio": 0.25},
                        rollout_metrics={"tackroom/trials": 4}))
    log.drop(Trained(Sampled(2, 0, first, 3.0), step=None, staleness=2))
    log.step(Trained(Sampled(3, 1, first, 2.0), step=2, staleness=0, train_s=1.0),
             StepRecord(step=2, batch=3, version=1, staleness=0, mean_reward=1.0, reward_per_task={"a": 1.0},
                        trained_trials=0, masked_trials=0, no_signal_trials=4, mismatch_mean=0.01,
                        mismatch_max=0.02))
    assert log.warnings == 1 and log.dropped == 1 and log.rewards == [0.5, 1.0]
    assert log.mismatch_mean == pytest.approx(0.105)

    steps = [json.loads(line) for line in (tmp_path / "steps.jsonl").read_text().splitlines()]
    assert steps[0]["mismatch_flagged"] is True and steps[1]["mismatch_flagged"] is False
    assert (steps[0]["rollout_s"], steps[0]["train_s"], steps[0]["handoff_s"]) == (4.0, 9.0, 1.5)
    assert steps[0]["reward/b"] == 0.5 and steps[0]["rollout/tackroom/trials"] == 4
    assert steps[0]["sent_rows"] == 2 and steps[0]["tis_token_clip_high_ratio"] == 0.25
    assert "sent_rows" not in steps[1] and steps[1]["loss"] is None and steps[1]["dropped_batches"] == 1

    rows = [json.loads(line) for line in (tmp_path / "trajectories.jsonl").read_text().splitlines()]
    assert len(rows) == 12
    assert [r["trained"] for r in rows[:4]] == [True, True, False, True]  # the masked row trained nothing
    assert all(r["dropped"] and r["step"] is None and r["staleness"] == 2 for r in rows[4:8])
    assert not any(r["trained"] for r in rows[8:])  # step 2 changed no weights
    assert rows[0] == {"batch": 1, "step": 1, "version": 0, "staleness": 0, "task_id": "a", "group": "a", "repetition": 0,
                       "reward": 1.0, "masked": False, "trained": True, "dropped": False}

    with (tmp_path / "reward_curve.csv").open() as f:
        table = list(csv.DictReader(f))
    assert list(table[0]) == [*curve.COLUMNS, "reward/a", "reward/b"]
    assert table[0]["sent_rows"] == "2" and table[1]["sent_rows"] == "" and table[1]["reward/b"] == ""
    assert log.finish(title="t").read_bytes()[:4] == b"\x89PNG"
    assert "WARNING" in lines[0] and "dropped" in lines[1] and "no learning signal" in lines[2]
    assert lines[-1].startswith("step  mean_reward")


def test_a_step_whose_trained_tokens_were_all_constrained_says_why_no_mismatch_was_measured(tmp_path: Path) -> None:
    lines: list[str] = []
    log = RunLog(tmp_path, steps_total=1, max_staleness=0, mismatch_warn=0.1, log=lines.append)
    batch = _rollout([1.0, 0.0], [[1, 1], [1, 1]], ["a", "a"])
    log.step(Trained(Sampled(1, 0, batch, 4.0), step=1, staleness=0, changed=True, train_s=9.0),
             StepRecord(step=1, batch=1, version=0, staleness=0, mean_reward=0.5, trained_trials=2, masked_trials=0,
                        mismatch_constrained=0.586))
    assert "not measured: every trained token was sampled under a grammar" in lines[0] and "0.586" in lines[0]
    assert "WARNING" not in lines[0] and log.warnings == 0 and log.mismatch_mean is None
    step = json.loads((tmp_path / "steps.jsonl").read_text())
    assert step["mismatch_mean"] is None and step["mismatch_constrained"] == 0.586


def test_the_server_never_takes_the_port_the_runs_engine_is_told(monkeypatch: pytest.MonkeyPatch) -> None:
    # The engine learns its port before it binds it; the kernel once handed the same port to the server in between,
    # both listened, and the engine's /health reached the server's 404 until the start timed out.
    from tackroom_train.config_tinker import TinkerSettings
    from tackroom_train.tinker import server

    handed = iter([8013, 8013, 40123])

    class Socket:
        def __enter__(self) -> Socket:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def bind(self, address: tuple[str, int]) -> None:
            self.port = next(handed)

        def getsockname(self) -> tuple[str, int]:
            return "127.0.0.1", self.port

    monkeypatch.setattr(server.socket, "socket", Socket)
    assert server.TinkerServer(TinkerSettings(engine_port=8013), "m", "/tmp/x").port == 40123
    assert server.TinkerServer(TinkerSettings(engine_port=8013, port=8020), "m", "/tmp/x").port == 8020

"""A mix's steps on the Tinker loop without a server: a GRPO group is one task under one harness (advantages never
compare two harnesses), a resampled group keeps its harness, and each harness's reward reaches the step's line,
``steps.jsonl``, ``trajectories.jsonl``, the curve, the trackers (TensorBoard's event file, read back) and the
summary. A scripted generator stands in for the rollouts (rewards set per harness); the rows, the batches, the
trainer's grouping, the log and the summary are the loop's own."""

from __future__ import annotations

import asyncio
import csv
import json
import struct
from pathlib import Path
from typing import Any, Callable

import pytest

from tackroom_train.config import load_train_config
from tackroom_train.config_mix import MixedHarness
from tackroom_train.dataset import mixed_rows
from tackroom_train.plan import resolve_plan
from tackroom_train.tinker.backend import harness_line
from tackroom_train.tinker.client import TrainingClient
from tackroom_train.tinker.loop import FinalPolicy, _summary
from tackroom_train.tinker.pipeline import Sampled, Trained
from tackroom_train.tinker.rollouts import RolloutBatch, Rollouts, task_batches
from tackroom_train.tinker.run_log import RunLog
from tackroom_train.tinker.server import TinkerCalls, TinkerSettings
from tackroom_train.tinker.step_trainer import BuiltinLoss, LossOutcome, StepTrainer
from tackroom_train.tracking import TrackerSet, open_trackers

TASKS = [{"task_id": t, "task_path": f"/tasks/{t}", "prompt": [{"role": "user", "content": t}],
          "env_class": "tackroom"} for t in ("a", "b")]
MIX = [MixedHarness(name="answer"), MixedHarness(name="archipelago", label="arch")]
ROWS = mixed_rows(TASKS, MIX)  # a@answer, a@arch, b@answer, b@arch

Script = Callable[[int, dict[str, Any], int], float]


class ScriptedGenerator:
    """Rewards by call, row and repetition: ``script(call, env_extras, repetition)``; records what each call got."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.calls: list[list[tuple[str, dict[str, Any]]]] = []

    async def generate(self, batch: dict[str, Any]) -> dict[str, Any]:
        ids, extras = batch["trajectory_ids"], batch["env_extras"]
        self.calls.append([(t.instance_id, e) for t, e in zip(ids, extras)])
        call = len(self.calls)
        rewards = [float(self.script(call, e, t.repetition_id)) for t, e in zip(ids, extras)]
        return {"prompt_token_ids": [[1, 2] for _ in ids], "response_ids": [[3, call] for _ in ids],
                "loss_masks": [[1, 1] for _ in ids], "rollout_logprobs": [[-0.1, -0.2] for _ in ids],
                "rewards": rewards, "stop_reasons": ["stop" for _ in ids], "trajectory_ids": list(ids),
                "trajectory_generation_times": [1.0 for _ in ids],
                "rollout_metrics": {"tackroom/trials": len(ids)}}


class PinnedSampler:
    def pin(self, version: int) -> None:
        pass

    async def check(self, what: str) -> None:
        pass


def by_harness(answer: float, arch: float) -> Script:
    """Every episode of a harness scores alike: a signal only between harnesses, never inside one."""
    return lambda call, extras, k: answer if extras["harness"] == "answer" else arch


def draw(script: Script, *, rows: list[dict[str, Any]] = ROWS, rounds: int = 0) -> tuple[RolloutBatch, ScriptedGenerator]:
    generator = ScriptedGenerator(script)
    rollouts = Rollouts(generator, PinnedSampler(), task_batches(rows, len(rows), seed=3),  # type: ignore[arg-type]
                        samples_per_prompt=3, temperature=1.0, max_generate_length=8, resample_rounds=rounds)
    return asyncio.run(rollouts(1, 0)), generator


def trainer() -> StepTrainer:
    client = TrainingClient(None, TinkerCalls(TinkerSettings()))  # a step without signal calls no server

    async def no_probe(batch: Any, step: int) -> LossOutcome:
        return LossOutcome(None, batch.subset([]), [])

    step_trainer = StepTrainer(client, BuiltinLoss(client, "importance_sampling", None, micro_batch=0),
                               aggregation="token_mean", learning_rate=1e-3, normalize_advantages=True, micro_batch=0)
    step_trainer.probe = no_probe  # type: ignore[method-assign]
    return step_trainer


def test_a_group_is_one_task_under_one_harness() -> None:
    batch, generator = draw(by_harness(1.0, 0.0))
    (call,) = generator.calls
    assert len(call) == len(ROWS) * 3
    for group, extras in call:  # each row's harness reaches the generator beside its task, and names its group
        assert group == f"{extras['task_id']}@{extras['harness']}"
    groups = batch.group_rows()
    assert sorted(groups) == ["a@answer", "a@arch", "b@answer", "b@arch"]
    for rows in groups.values():
        assert len({batch.harness_of(i) for i in rows}) == 1 and len({batch.task_ids[i] for i in rows}) == 1
    assert sorted(set(batch.task_ids)) == ["a", "b"]


def test_advantages_compare_episodes_of_the_same_harness_only() -> None:
    # answer always 1, archipelago always 0: between harnesses the rewards differ, inside each group they do not.
    # Grouped by task alone, every group would hold 1s and 0s and train on the harness gap.
    batch, _ = draw(by_harness(1.0, 0.0))
    trained = trainer().batch(batch)
    assert not trained.has_signal and all(row.advantage == 0.0 for row in trained.rows)
    assert batch.signal_groups() == set()

    # a difference inside a harness is signal, and only that harness's rows get advantages
    batch, _ = draw(lambda call, extras, k: float(k == 0) if extras["harness"] == "arch" else 1.0)
    trained = trainer().batch(batch)
    assert batch.signal_groups() == {"a@arch", "b@arch"}
    for i, row in enumerate(trained.rows):
        assert (row.advantage != 0.0) == (batch.harness_of(i) == "arch")


def test_a_resampled_group_keeps_its_task_and_harness() -> None:
    # call 1: no group has signal; call 2 (the resample round) gives archipelago's groups one
    def script(call: int, extras: dict[str, Any], k: int) -> float:
        return float(k == 0) if call == 2 and extras["harness"] == "arch" else 0.5

    batch, generator = draw(script, rounds=1)
    assert len(generator.calls) == 2
    assert batch.signal_groups() == {"a@arch", "b@arch"}  # the second draw's, trained first
    assert len(batch.group_rows()) == 4 and any(group.endswith("@0") for group in batch.group_rows())
    for group, rows in batch.group_rows().items():
        assert {batch.harness_of(i) for i in rows} == {group.split("@")[1]}
        assert {batch.task_ids[i] for i in rows} == {group.split("@")[0]}
    # the step's rollout metrics cover every draw: each harness's mean over all its rows (12 + 6 of archipelago)
    metrics = batch.output["rollout_metrics"]
    assert metrics["tackroom/harness/answer/mean_reward"] == pytest.approx(0.5)
    assert metrics["tackroom/harness/arch/mean_reward"] == pytest.approx((6 * 0.5 + 2 * 1.0) / 12)


def tensorboard_tags(folder: Path) -> dict[int, dict[str, float]]:
    from tensorboardX.proto import event_pb2

    steps: dict[int, dict[str, float]] = {}
    for path in folder.glob("events.out.tfevents.*"):
        data, at = path.read_bytes(), 0
        while at < len(data):
            (length,) = struct.unpack("<Q", data[at:at + 8])
            event = event_pb2.Event.FromString(data[at + 12:at + 12 + length])
            at += 12 + length + 4
            for value in event.summary.value:
                steps.setdefault(event.step, {})[value.tag] = value.simple_value
    return steps


def run_two_steps(tmp_path: Path, lines: list[str]) -> RunLog:
    """Step 1 draws every row (answer 1.0, archipelago 0.0); step 2 only answer's (0.5)."""
    log = RunLog(tmp_path, steps_total=2, max_staleness=0, mismatch_warn=0.1, log=lines.append,
                 trackers=TrackerSet(open_trackers(["tensorboard"], tmp_path, run_name="r", config={}), lines.append),
                 harnesses=["answer", "arch"])
    answer_only = [row for row in ROWS if row["harness"] == "answer"]
    for step, (script, rows) in enumerate([(by_harness(1.0, 0.0), ROWS), (by_harness(0.5, 0.0), answer_only)], 1):
        batch, _ = draw(script, rows=rows)
        sampled = Sampled(step, 0, batch, 2.0)
        changed, record = asyncio.run(trainer().train(sampled, step=step, staleness=0))
        log.step(Trained(sampled, step=step, staleness=0, changed=changed, train_s=1.0), record)
    log.trackers.close()
    return log


def test_each_harness_reward_is_reported_per_step(tmp_path: Path) -> None:
    lines: list[str] = []
    log = run_two_steps(tmp_path, lines)
    assert lines[0].startswith("step 1/2: mean reward 0.500 [answer 1.000, arch 0.000] (")
    assert lines[1].startswith("step 2/2: mean reward 0.500 [answer 0.500, arch -] (")

    steps = [json.loads(line) for line in (tmp_path / "steps.jsonl").read_text().splitlines()]
    assert (steps[0]["reward/answer"], steps[0]["reward/arch"]) == (1.0, 0.0)
    assert (steps[0]["reward/answer/a"], steps[0]["reward/arch/b"]) == (1.0, 0.0)  # each task under each harness
    assert "reward/arch" not in steps[1] and steps[1]["reward/answer"] == 0.5

    trajectories = [json.loads(line) for line in (tmp_path / "trajectories.jsonl").read_text().splitlines()]
    assert len(trajectories) == 12 + 6
    assert {(t["task_id"], t["harness"], t["group"]) for t in trajectories[:12]} == {
        (task, label, f"{task}@{label}") for task in "ab" for label in ("answer", "arch")}

    with (tmp_path / "reward_curve.csv").open() as f:
        table = list(csv.DictReader(f))
    assert (table[0]["reward/answer"], table[0]["reward/arch"], table[1]["reward/arch"]) == ("1.0", "0.0", "")

    tags = tensorboard_tags(tmp_path / "tensorboard")
    assert tags[1]["reward/answer"] == 1.0 and tags[1]["reward/arch"] == 0.0 and tags[1]["reward/mean"] == 0.5
    assert tags[1]["reward/arch/a"] == 0.0 and "reward/arch" not in tags[2]

    assert log.finish(title="mix").read_bytes()[:4] == b"\x89PNG"
    table_lines = lines[-1].splitlines()
    assert table_lines[0].split()[-2:] == ["answer", "arch"] and table_lines[2].split()[-2:] == ["0.500", "-"]


def test_the_summary_keeps_each_harness_reward_per_step(tmp_path: Path) -> None:
    lines: list[str] = []
    (tmp_path / "run").mkdir()
    log = run_two_steps(tmp_path / "run", lines)
    config_path = tmp_path / "mix.toml"
    config_path.write_text(f"""
tasks = ["{Path(__file__).resolve().parents[3] / 'examples/train/overfit-tasks'}"]
backend = "tinker"
[[harnesses]]
name = "answer"
[[harnesses]]
name = "archipelago"
label = "arch"
[sandbox]
name = "local"
[model]
path = "smollm2"
""")
    plan = resolve_plan(load_train_config(config_path))
    summary = _summary(plan, log, log.finish(title="mix"), FinalPolicy(None, error="not exported here"), None)
    assert summary.reward_per_step == [0.5, 0.5] and summary.harnesses == ["answer", "arch"]
    assert summary.reward_per_harness_per_step == {"answer": [1.0, 0.5], "arch": [0.0, None]}
    assert json.loads(summary.model_dump_json())["reward_per_harness_per_step"]["arch"] == [0.0, None]
    assert harness_line(summary.reward_per_harness_per_step) == (
        "reward per harness (first → last step it ran in): answer 1.000 → 0.500, arch 0.000 → 0.000")

"""A mix of harnesses trained end to end against a real SkyRL Tinker server on this CPU: ``answer`` (chat only,
through the policy gateway) and ``archipelago`` (its own token ids) on the three overfit tasks, two steps,
sampling on the run's own vLLM engine with the live LoRA. Every step's batch holds both harnesses' groups, each
group one task under one harness, and each harness's reward is in the step line, ``steps.jsonl``, the curve and
``summary.json``. Marked ``tinker`` (the server's uv project and the converted SmolLM2 are needed: a missing piece
skips locally and fails under CI) and slow: the server's and the engine's start are most of its minutes."""

from __future__ import annotations

import asyncio
import csv
import json
from collections import defaultdict
from pathlib import Path

import pytest

from tackroom import Trajectory
from tackroom.testing import skip_or_fail
from tackroom_train.config import load_train_config
from tackroom_train.tinker.loop import run_tinker

ROOT = Path(__file__).resolve().parents[3]

pytestmark = [pytest.mark.tinker, pytest.mark.slow, pytest.mark.timeout(3600)]

CONFIG = f"""
tasks = ["{ROOT / 'examples/train/overfit-tasks'}"]
backend = "tinker"

[[harnesses]]
name = "answer"
system = "Answer with one word only."
max_tokens = 16

[[harnesses]]
name = "archipelago"
label = "arch"
world = "{ROOT / 'examples/worlds/acme'}"
tools_include = ["final_answer_only"]
final_answer_tool = true
tool_choice = "auto"
max_steps = 2
max_tokens_per_turn = 16
answer_path = "/app/answer.txt"
system_prompt = "Answer with one word only."

[sandbox]
name = "local"

[verifier]
name = "test-script"

[loss]
name = "dppo"
aggregation = "sequence_mean"

[model]
path = "smollm2"
tokenizer = "smollm2"

[policy]
tokenizer = "smollm2"

[train]
mini_batch_size = 6               # every (task, harness) row each step
samples_per_prompt = 2
max_staleness_steps = 0
learning_rate = 2e-3
max_training_steps = 2
temperature = 1.0
max_generate_length = 16
preflight_passes = 0
resample_rounds = 0

[tinker]
lora_rank = 8
backend_config = {{ max_lora_adapters = 2, max_lora_rank = 8, train_micro_batch_size = 2 }}

[gpus]
context_length = 4096

[rollout]
infra_attempts = 2
"""


def test_a_mix_trains_with_each_harness_reported(tmp_path: Path, free_port: int) -> None:
    from tackroom_engine import model_dir
    from tackroom_train.tinker.server import server_dir

    if not (model_dir() / "config.json").is_file():
        skip_or_fail("SmolLM2 is not converted yet: run `tackroom model up` once")
    if not (server_dir() / ".venv").is_dir():
        skip_or_fail("the Tinker server's environment is not installed: `uv run python -m tackroom_train.tinker.server`")
    (tmp_path / "mix.toml").write_text(CONFIG)
    config = load_train_config(tmp_path / "mix.toml")
    config.tinker.engine_port = free_port
    lines: list[str] = []
    run = tmp_path / "run"
    summary = asyncio.run(run_tinker(config, run, log=lines.append))
    print("\n".join(lines))

    assert any(line.startswith("6 rows (3 tasks × harnesses answer, arch), 2 steps × 6 (task, harness) groups")
               for line in lines)
    steps = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()]
    assert len(steps) == summary.steps == 2
    for step, line in zip(steps, [line for line in lines if line.startswith("step ")]):
        assert f"[answer {step['reward/answer']:.3f}, arch {step['reward/arch']:.3f}]" in line
        assert step["mean_reward"] == pytest.approx((step["reward/answer"] + step["reward/arch"]) / 2)
        for task in ("say-blue", "say-seven", "say-yes"):
            assert f"reward/answer/{task}" in step and f"reward/arch/{task}" in step
    assert summary.harnesses == ["answer", "arch"]
    assert summary.reward_per_harness_per_step == {
        label: [s[f"reward/{label}"] for s in steps] for label in ("answer", "arch")}
    with Path(summary.curve_csv).open() as f:
        assert {"reward/answer", "reward/arch"} <= set(next(csv.DictReader(f)))

    # every group one task under one harness, and both harnesses in every step
    groups: dict[tuple[int, str], set[tuple[str, str]]] = defaultdict(set)
    for row in (json.loads(line) for line in (run / "trajectories.jsonl").read_text().splitlines()):
        groups[(row["step"], row["group"])].add((row["task_id"], row["harness"]))
    assert len(groups) == 2 * 6 and all(len(members) == 1 for members in groups.values())
    assert {label for members in groups.values() for _, label in members} == {"answer", "arch"}

    # each trial ran under its row's harness, with exact token ids from both routes (gateway and direct)
    by_harness: dict[str, list[Trajectory]] = defaultdict(list)
    for result in run.glob("rollouts/*/*/result.json"):
        harness = json.loads(result.read_text())["harness"]
        by_harness[harness].append(Trajectory.model_validate_json((result.parent / "trajectory.json").read_text()))
    assert {k: len(v) for k, v in by_harness.items()} == {"answer": 12, "arch": 12}
    for trajectories in by_harness.values():
        assert any(t.token_ids and any(t.loss_mask) and t.logprobs for t in trajectories)
    assert summary.policy is not None and summary.policy_error is None

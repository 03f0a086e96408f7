"""TackroomGenerator: the GeneratorOutput contract against the real local engine, and the masking rules with real failures.

The engine test runs terminus (chat-only, so through the policy gateway) on
the hello-file example task with SmolLM2-135M, two samples, two turns at
most: kept lean, the machine is shared. The masking tests use the oracle
harness and tasks that really fail: a test script that writes no reward
(``task``), a solution that kills its sandbox (``infra``, retried then
masked) and the slow-agent example (agent timeout).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from skyrl.train.generators.base import BatchMetadata, GeneratorOutput, TrajectoryID

from tackroom import SandboxError, Trajectory, TrialResult
from tackroom_gateway import load_tokenizer
from tackroom_train.config import TrainConfig
from tackroom_train.generator import TackroomGenerator
from tackroom_train.masking import RowOutcome, decide_group
from tackroom_train.tinker.datums import CONSTRAINED_KEY

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "tasks"
GENERATOR_OUTPUT_KEYS = set(GeneratorOutput.__annotations__)


def batch(rows: list[tuple[str, Path]], step: int = 0, sampling: dict | None = None) -> dict:
    """A GeneratorInput as SkyRL's trainer builds it: (instance id, task dir) per row."""
    reps: dict[str, int] = {}
    ids = []
    for instance, _ in rows:
        ids.append(TrajectoryID(instance_id=instance, repetition_id=reps.setdefault(instance, 0)))
        reps[instance] += 1
    return {
        "prompts": [[{"role": "user", "content": (p / "instruction.md").read_text()}] for _, p in rows],
        "env_classes": ["tackroom"] * len(rows),
        "env_extras": [{"task_id": p.name, "task_path": str(p)} for _, p in rows],
        "sampling_params": sampling,
        "trajectory_ids": ids,
        "batch_metadata": BatchMetadata(global_step=step, training_phase="train"),
    }


def make_task(root: Path, name: str, solve: str, test: str, agent_timeout: float = 30) -> Path:
    task = root / name
    (task / "solution").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "task.toml").write_text(f'version = "1.0"\n[agent]\ntimeout_sec = {agent_timeout}\n[verifier]\ntimeout_sec = 30\n')
    (task / "instruction.md").write_text(f"Task {name}.")
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\n" + solve + "\n")
    (task / "tests" / "test.sh").write_text("#!/bin/bash\n" + test + "\n")
    return task


def read_run(generator: TackroomGenerator) -> tuple[list[TrialResult], list[Trajectory]]:
    (run_dir,) = [d for d in generator.run_root.iterdir() if d.is_dir()]
    trials = sorted(d for d in run_dir.iterdir() if d.is_dir())
    results = [TrialResult.model_validate_json((d / "result.json").read_text()) for d in trials]
    return results, [Trajectory.model_validate_json((d / "trajectory.json").read_text()) for d in trials]


# -- the contract, with the real model ------------------------------------------------------------

@pytest.mark.engine
async def test_generator_output_contract_on_the_real_engine(tmp_path, engine_url):
    config = TrainConfig.model_validate({
        "tasks": [str(EXAMPLES / "hello-file")],
        "harness": {"name": "terminus", "max_turns": 2, "structured_outputs": True, "structured_max_chars": 48,
                    "structured_max_commands": 2, "max_tokens": 128, "max_command_duration_sec": 1.0},
        "sandbox": {"name": "local"}, "verifier": {"name": "test-script"},
        "policy": {"tokenizer": "smollm2"},
        "model": {"path": "HuggingFaceTB/SmolLM2-135M-Instruct", "tokenizer": "smollm2"},
        "rollout": {"infra_attempts": 1},
    })
    tokenizer = load_tokenizer("smollm2")
    generator = TackroomGenerator(config, base_url=engine_url, tokenizer=tokenizer, run_root=tmp_path / "rollouts")
    assert generator.uses_gateway, "terminus speaks only chat: it goes through the policy gateway"
    inp = batch([("hello", EXAMPLES / "hello-file")] * 2, step=3, sampling={"temperature": 0.0, "max_generate_length": 128})
    try:
        out = await generator.generate(inp)
    finally:
        await generator.aclose()

    assert set(out) == GENERATOR_OUTPUT_KEYS | {CONSTRAINED_KEY}, "SkyRL's keys, and the grammar marks always"
    results, trajectories = read_run(generator)
    assert next(generator.run_root.iterdir()).name.startswith("step00003-")
    n = 2
    for key in ("prompt_token_ids", "response_ids", "rewards", "loss_masks", "stop_reasons", "rollout_logprobs",
                "trajectory_ids", "trajectory_generation_times"):
        assert len(out[key]) == n, key
    assert out["trajectory_ids"] == inp["trajectory_ids"]
    by_pass = {r.pass_index: (r, t) for r, t in zip(results, trajectories)}
    for i in range(n):
        result, traj = by_pass[i]
        assert result.error is None or result.error_class == "model", result.error
        prompt, response, mask, logprobs = (out["prompt_token_ids"][i], out["response_ids"][i],
                                            out["loss_masks"][i], out["rollout_logprobs"][i])
        # exact tokens: the trajectory's ids, split at the first generated token
        first = traj.loss_mask.index(1)
        assert prompt + response == traj.token_ids and len(prompt) == first
        assert prompt == traj.turns[0].prompt_ids, "the prompt is exactly what the engine saw first"
        assert mask == traj.loss_mask[first:] and mask[0] == 1
        assert response[: len(traj.turns[0].completion_ids)] == traj.turns[0].completion_ids
        assert len(logprobs) == len(response) == len(mask) == len(out[CONSTRAINED_KEY][i])
        # structured outputs: each turn's logprobs came from under the grammar, and the marks say so per token
        assert all(t.logprobs_constrained for t in traj.turns)
        assert [f for f, m in zip(out[CONSTRAINED_KEY][i], mask) if m] == [1] * sum(mask)
        assert logprobs == traj.logprobs[first:]
        generated = [lp for lp, m in zip(logprobs, mask) if m]
        assert all(lp <= 0.0 for lp in generated) and any(lp < 0.0 for lp in generated)
        assert tokenizer.decode(prompt).count("<|im_start|>assistant") == 1, "the prompt ends at the first answer"
        assert out["rewards"][i] == result.reward and result.reward in (0.0, 1.0)
        expected_stop = "stop" if traj.stop_reason == "completed" else traj.stop_reason
        assert out["stop_reasons"][i] == expected_stop
        assert out["trajectory_generation_times"][i] == result.timings["total"] > 0
    m = out["rollout_metrics"]
    assert m["tackroom/trials"] == 2 and m["tackroom/trained_trials"] == 2 and m["tackroom/masked_trials"] == 0
    assert m["tackroom/errors_infra"] == m["tackroom/errors_task"] == 0
    assert m["tackroom/behaviour/turns"] == sum(len(t.turns) for t in trajectories) / 2
    json.dumps(m)  # a tracker can log it


@pytest.mark.engine
@pytest.mark.parametrize("filtering", [False, True])
async def test_overlong_filtering_masks_answers_the_engine_cut_off(tmp_path, engine_url, filtering):
    """``[rollout] apply_overlong_filtering``: an answer cut at ``max_tokens`` (one token here, so every answer)
    is masked and keeps its grade; without the option it trains as before."""
    say_blue = Path(__file__).resolve().parents[3] / "examples" / "train" / "overfit-tasks" / "say-blue"
    config = TrainConfig.model_validate({
        "tasks": [str(say_blue)], "harness": {"name": "answer", "max_tokens": 16},
        "sandbox": {"name": "local"}, "verifier": {"name": "test-script"}, "policy": {"tokenizer": "smollm2"},
        "model": {"path": "HuggingFaceTB/SmolLM2-135M-Instruct", "tokenizer": "smollm2"},
        "rollout": {"infra_attempts": 1, "apply_overlong_filtering": filtering},
    })
    generator = TackroomGenerator(config, base_url=engine_url, tokenizer=load_tokenizer("smollm2"),
                                  run_root=tmp_path / "rollouts")
    try:
        out = await generator.generate(batch([("blue", say_blue)] * 2,
                                             sampling={"temperature": 0.0, "max_generate_length": 1}))
    finally:
        await generator.aclose()
    results, trajectories = read_run(generator)
    assert [t.stop_reason for t in trajectories] == ["max_tokens"] * 2 and out["stop_reasons"] == ["max_tokens"] * 2
    assert all(r.error is None and r.reward is not None for r in results), [r.error for r in results]
    assert sorted(out["rewards"]) == sorted(r.reward for r in results), "a cut-off answer keeps its grade"
    m = out["rollout_metrics"]
    if filtering:
        assert all(sum(mask) == 0 for mask in out["loss_masks"]) and m["tackroom/masked_overlong"] == 2
        assert m["tackroom/trained_trials"] == 0 and m["tackroom/masked_trials"] == 2
    else:
        assert all(sum(mask) == 1 for mask in out["loss_masks"]) and "tackroom/masked_overlong" not in m
        assert m["tackroom/trained_trials"] == 2


# -- masking with real failures (oracle harness, no model) ----------------------------------------

def oracle_config(tasks: list[Path], **rollout) -> TrainConfig:
    return TrainConfig.model_validate({
        "tasks": [str(t) for t in tasks], "harness": {"name": "oracle"}, "sandbox": {"name": "local"},
        "verifier": {"name": "test-script"}, "model": {"path": "m"}, "rollout": rollout,
    })


async def test_task_error_masks_the_group_and_infra_is_retried_then_masked(tmp_path, monkeypatch):
    from tackroom_local import LocalSandbox

    # An agent can no longer kill its own sandbox (PID 1 ignores it): the host kills this one (as an OOM
    # kill of bwrap would) when the agent's turn ends, on every attempt: an infra error, retried, then masked.
    real_kill = LocalSandbox.kill_processes

    async def dies_for_the_killer(self, **kw):
        if self.spec.name.startswith("kills-sandbox"):
            await self.stop()
            raise SandboxError("sandbox died (killed from the host)")
        return await real_kill(self, **kw)

    monkeypatch.setattr(LocalSandbox, "kill_processes", dies_for_the_killer)
    broken = make_task(tmp_path, "broken-test", solve="echo done > /app/x", test="exit 0  # writes no reward")
    killer = make_task(tmp_path, "kills-sandbox", solve="true", test="echo 1 > /logs/verifier/reward.txt")
    hello = EXAMPLES / "hello-file"
    config = oracle_config([broken, killer, hello], infra_attempts=2)
    generator = TackroomGenerator(config, base_url="http://127.0.0.1:9/v1", tokenizer=load_tokenizer("smollm2"),
                                  run_root=tmp_path / "rollouts", retry_backoff_sec=0.01)
    out = await generator.generate(batch([("b", broken), ("b", hello), ("k", killer), ("k", hello)]))
    results, _ = read_run(generator)
    by_task = {}
    for r in results:
        by_task.setdefault(r.task, []).append(r)
    assert by_task["broken-test"][0].error_class == "task"
    (killed,) = by_task["kills-sandbox"]
    assert killed.error_class == "infra" and killed.attempt == 2 and len(killed.previous_attempts) == 1
    assert "sandbox died" in killed.error.message

    assert all(sum(m) == 0 for m in out["loss_masks"]), "oracle leaves no tokens; failures mask"
    # group b: the task error masks both rows, reward 0
    assert out["rewards"][:2] == [0.0, 0.0]
    # group k: the infra row takes the group's graded mean (hello-file's 1.0), so it moves no baseline
    assert out["rewards"][2:] == [1.0, 1.0]
    m = out["rollout_metrics"]
    assert m["tackroom/masked_groups_task"] == 1 and m["tackroom/masked_task"] == 2
    assert m["tackroom/masked_infra"] == 1 and m["tackroom/errors_infra"] == 1
    assert m["tackroom/retried_attempts"] == 1 and m["tackroom/masked_no_tokens"] == 1
    assert m["tackroom/masked_trials"] == 4 and m["tackroom/trials"] == 4
    # masked rows still carry a well-formed sequence: the rendered prompt and one masked token
    assert all(len(r) == 1 and len(p) > 5 for p, r in zip(out["prompt_token_ids"], out["response_ids"]))
    # nothing ran under a grammar: the marks are there (SkyRL concatenates groups by the first one's keys), all 0
    assert out[CONSTRAINED_KEY] == [[0]] * 4


async def test_timeouts_mask_themselves_or_the_whole_group(tmp_path):
    slow, hello = EXAMPLES / "slow-agent", EXAMPLES / "hello-file"
    generator = TackroomGenerator(oracle_config([slow, hello]), base_url="http://127.0.0.1:9/v1",
                                  tokenizer=load_tokenizer("smollm2"), run_root=tmp_path / "rollouts")
    out = await generator.generate(batch([("two", slow), ("two", slow), ("one", slow), ("one", hello)]))
    m = out["rollout_metrics"]
    assert m["tackroom/timed_out"] == 3
    assert m["tackroom/masked_groups_timeout_group"] == 1 and m["tackroom/masked_timeout_group"] == 2
    assert m["tackroom/masked_timeout"] == 1, "one timeout in a group masks only itself"
    assert out["rewards"][:2] == [0.0, 0.0]
    assert out["stop_reasons"][0] == "agent_timeout"


def test_masking_rules_table():
    ok = RowOutcome(reward=1.0)
    zero = RowOutcome(reward=0.0)
    model = RowOutcome(error_class="model", reward=0.0)
    timeout = RowOutcome(error_class="model", timed_out=True, reward=0.0)
    infra = RowOutcome(error_class="infra", has_tokens=False)
    task = RowOutcome(error_class="task", has_tokens=False)

    d = decide_group([ok, model, zero])
    assert [r.masked for r in d.rows] == [False, False, False], "model errors train"
    assert [r.reward for r in d.rows] == [1.0, 0.0, 0.0] and d.counts == {"model_errors": 1}

    d = decide_group([ok, infra, zero])
    assert [r.reason for r in d.rows] == [None, "infra", None] and d.rows[1].reward == 0.5

    d = decide_group([ok, timeout, ok])
    assert [r.reason for r in d.rows] == [None, "timeout", None] and d.rows[1].reward == 1.0

    d = decide_group([ok, timeout, timeout])
    assert all(r.reason == "timeout_group" and r.reward == 0.0 for r in d.rows)
    assert decide_group([ok, timeout, timeout], timeout_group_threshold=3).rows[0].masked is False

    d = decide_group([ok, ok, task])
    assert all(r.reason == "task" for r in d.rows) and d.counts["masked_groups_task"] == 1

    d = decide_group([infra, infra])
    assert all(r.masked and r.reward == 0.0 for r in d.rows)

    cut = RowOutcome(truncated=True, reward=0.5)
    assert [r.masked for r in decide_group([ok, cut, zero]).rows] == [False, False, False], "filtering is opt-in"
    d = decide_group([ok, cut, zero, infra], overlong_filtering=True)
    assert [r.reason for r in d.rows] == [None, "overlong", None, "infra"]
    # the cut-off row keeps its grade, and counts in the baseline a failed row takes
    assert [r.reward for r in d.rows] == [1.0, 0.5, 0.0, 0.5] and d.counts == {"masked_overlong": 1, "masked_infra": 1}
    cut_model_error = RowOutcome(error_class="model", truncated=True, reward=0.0)  # the context ran out
    assert decide_group([cut_model_error], overlong_filtering=True).rows[0].reason == "overlong"


def test_a_trial_is_cut_off_by_its_last_engine_call_or_its_harness():
    from tackroom import TokenTurn
    from tackroom_train.generator import RolloutRow

    def row(finishes: list[str], stop: str = "completed") -> RolloutRow:
        turns = [TokenTurn(prompt_ids=[1], completion_ids=[2], finish_reason=f) for f in finishes]
        result = TrialResult(trial_id="t", task="t", harness="h", sandbox="s", verifier="v", reward=0.5)
        return RolloutRow(result, Trajectory(turns=turns, stop_reason=stop))

    assert row(["stop", "length"]).outcome().truncated, "the engine's finish_reason, whatever the harness says"
    assert not row(["length", "stop"]).outcome().truncated, "a turn cut mid-episode that the agent went on from"
    assert row(["stop"], stop="context_exhausted").outcome().truncated
    assert not row(["stop"], stop="max_turns").outcome().truncated, "a turn budget is not a token limit (as SkyRL)"
    assert not row([]).outcome().truncated

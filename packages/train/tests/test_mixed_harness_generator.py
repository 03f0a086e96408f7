"""The mix at the generator, the boundary both backends share (SkyRL's ``GeneratorInterface``), without a GPU: the
prompt rows of a ``[[harnesses]]`` config go through SkyRL's own ``PromptDataset`` and ``prepare_generator_input``
(as its trainer feeds the generator) and each trial runs under its row's harness; SkyRL's own
``concatenate_generator_outputs`` keeps each harness's reward apart; each harness is routed as it would be alone
(a chat-only one through the real policy gateway, one with its own token accounting straight to the endpoint).
The trials are real (local sandbox, test-script verifier); ``oracle`` (solves every task: reward 1) and ``nop``
(does nothing: reward 0) are the two harnesses, so the rewards say which harness ran a row, without a model."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from skyrl.train.dataset.dataset import PromptDataset
from skyrl.train.generators.utils import concatenate_generator_outputs, prepare_generator_input

from tackroom import ConfigError, TrialResult
from tackroom_gateway import load_tokenizer
from tackroom_train.config import TrainConfig, load_train_config
from tackroom_train.dataset import write_prompt_dataset
from tackroom_train.generator import TackroomGenerator
from tackroom_train.plan import RolloutSide, resolve_plan

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples" / "tasks"
ARCHIPELAGO = {"world": str(ROOT / "examples" / "worlds" / "acme"), "tools_include": ["final_answer_only"],
               "final_answer_tool": True, "tool_choice": "auto", "max_steps": 2, "max_tokens_per_turn": 16,
               "answer_path": "/app/answer.txt", "system_prompt": "Answer with one word only."}
NOWHERE = "http://127.0.0.1:9/v1"  # no trial of oracle or nop calls a model

MIX = f"""
tasks = ["{EXAMPLES / 'hello-file'}", "{EXAMPLES / 'touch-done'}"]
[[harnesses]]
name = "oracle"
[[harnesses]]
name = "nop"
label = "idle"
[sandbox]
name = "local"
[verifier]
name = "test-script"
[model]
path = "smollm2"
[rollout]
infra_attempts = 1
"""


def skyrl_input(tmp_path: Path, rows: list[dict], samples: int, tokenizer) -> tuple[dict, list[str]]:
    """The generator input SkyRL's trainer builds from the prompt dataset ``tackroom train`` writes."""
    # num_workers = 0: SkyRL filters the prompts in this process (no fork of a process that runs threads)
    dataset = PromptDataset([str(write_prompt_dataset(rows, tmp_path / "prompts.jsonl"))], tokenizer,
                            max_prompt_length=2048, num_workers=0)
    prompts = dataset.collate_fn([dataset[i] for i in range(len(dataset))])
    return prepare_generator_input(prompts, samples, {"temperature": 1.0, "max_generate_length": 8}, "tackroom",
                                   "train", 0)


def results_by_pass(run_root: Path) -> dict[int, TrialResult]:
    (run_dir,) = [d for d in run_root.iterdir() if d.is_dir()]
    results = [TrialResult.model_validate_json(p.read_text()) for p in run_dir.glob("*/result.json")]
    return {r.pass_index: r for r in results}


async def test_each_row_runs_under_its_harness_through_skyrls_own_input(tmp_path: Path) -> None:
    (tmp_path / "mix.toml").write_text(MIX)
    plan = resolve_plan(load_train_config(tmp_path / "mix.toml"))
    tokenizer = load_tokenizer("smollm2")
    batch, uids = skyrl_input(tmp_path, plan.rows, 2, tokenizer)
    generator = TackroomGenerator(plan.rollout, base_url=NOWHERE, tokenizer=tokenizer, run_root=tmp_path / "rollouts")
    assert set(generator.harnesses) == {"oracle", "idle"} and generator.harness is None
    assert not generator.uses_gateway, "neither harness chats: no gateway is started"
    out = await generator.generate(batch)

    results = results_by_pass(generator.run_root)
    assert len(results) == len(uids) == 8  # 2 tasks × 2 harnesses × 2 samples
    for i, extras in enumerate(batch["env_extras"]):
        label = extras["harness"]
        assert results[i].harness == label and results[i].task == extras["task_id"]  # the row's own harness ran it
        assert out["rewards"][i] == results[i].reward == (1.0 if label == "oracle" else 0.0)
    # a group (SkyRL's uid: the prompt row) is one task under one harness
    for uid in set(uids):
        assert len({batch["env_extras"][i]["harness"] for i, u in enumerate(uids) if u == uid}) == 1
    metrics = out["rollout_metrics"]
    assert metrics["tackroom/harness/oracle/mean_reward"] == 1.0 and metrics["tackroom/harness/idle/mean_reward"] == 0.0
    assert metrics["tackroom/trials"] == 8 and metrics["tackroom/mean_raw_reward"] == 0.5


async def test_skyrls_fully_async_merge_keeps_each_harness_reward(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # SkyRL's fully-async trainer generates one group a call and merges the groups' outputs for a step
    if importlib.util.find_spec("torchdata") is None:
        # the merge ends in SkyRL's output check, whose module imports SkyRL's GPU stack (torchdata); not installed
        # here, so the check alone is skipped: the merge of the metrics is SkyRL's own code either way
        monkeypatch.setitem(sys.modules, "skyrl.train.utils.trainer_utils",
                            SimpleNamespace(validate_generator_output=lambda *args, **kwargs: None))
    (tmp_path / "mix.toml").write_text(MIX)
    plan = resolve_plan(load_train_config(tmp_path / "mix.toml"))
    tokenizer = load_tokenizer("smollm2")
    batch, uids = skyrl_input(tmp_path, plan.rows, 1, tokenizer)
    generator = TackroomGenerator(plan.rollout, base_url=NOWHERE, tokenizer=tokenizer, run_root=tmp_path / "rollouts")
    outputs = []
    for i in range(len(uids)):
        one = {key: (value[i:i + 1] if isinstance(value, list) else value) for key, value in batch.items()}
        outputs.append(await generator.generate(one))
    merged = concatenate_generator_outputs(outputs)
    assert merged["rewards"] == [1.0 if e["harness"] == "oracle" else 0.0 for e in batch["env_extras"]]
    assert merged["rollout_metrics"]["tackroom/harness/oracle/mean_reward"] == 1.0
    assert merged["rollout_metrics"]["tackroom/harness/idle/mean_reward"] == 0.0


async def test_each_harness_is_routed_as_it_would_be_alone(tmp_path: Path) -> None:
    # answer speaks only chat (through the real policy gateway: exact token ids), archipelago sends its own token
    # ids to the endpoint; both in one batch against the scripted teacher (an engine whose replies a function
    # writes: "blue"), on the overfit task whose test wants exactly that word
    from tackroom_train.collect.teacher import serve_teacher, teacher_for

    task = ROOT / "examples" / "train" / "overfit-tasks" / "say-blue"
    config = TrainConfig.model_validate({
        "tasks": [str(task)], "model": {"path": "smollm2", "tokenizer": "smollm2"},
        "policy": {"tokenizer": "smollm2"}, "sandbox": {"name": "local"}, "rollout": {"infra_attempts": 1},
        "harnesses": [{"name": "answer", "max_tokens": 8},
                      {"name": "archipelago", "label": "arch", **ARCHIPELAGO}]})
    plan = resolve_plan(config)
    tokenizer = load_tokenizer("smollm2")
    batch, _ = skyrl_input(tmp_path, plan.rows, 1, tokenizer)
    teacher = teacher_for(lambda prompt: "blue", "smollm2")
    async with serve_teacher(teacher) as url:
        generator = TackroomGenerator(plan.rollout, base_url=url, tokenizer=tokenizer, run_root=tmp_path / "rollouts")
        assert generator.wants_gateway("answer") and not generator.wants_gateway("arch") and generator.uses_gateway
        try:
            out = await generator.generate(batch)
            plugins = generator._plugins({})
        finally:
            await generator.aclose()
    assert plugins["answer"].policy_for is not None, "a chat-only harness gets gateway sessions"
    assert plugins["arch"].policy_for is None and plugins["arch"].label == "arch", "archipelago calls the engine"
    results = results_by_pass(generator.run_root)
    for i, extras in enumerate(batch["env_extras"]):
        assert results[i].harness == extras["harness"] and results[i].error is None, results[i].error
        assert out["rewards"][i] == 1.0
        # token-level rows from both routes: the loss mask marks the teacher's reply, the logprobs line up
        mask, response = out["loss_masks"][i], out["response_ids"][i]
        assert mask[0] == 1 and len(out["rollout_logprobs"][i]) == len(response) == len(mask)
        assert tokenizer.decode([t for t, m in zip(response, mask) if m]).startswith("blue")
    assert teacher.requests >= 2


def test_a_row_naming_a_harness_the_run_lacks_is_refused(tmp_path: Path) -> None:
    (tmp_path / "mix.toml").write_text(MIX)
    plan = resolve_plan(load_train_config(tmp_path / "mix.toml"))
    mixed = TackroomGenerator(plan.rollout, base_url=NOWHERE, run_root=tmp_path / "r")
    plugins = mixed._plugins({})
    with pytest.raises(ConfigError, match="harness 'terminus': the mix's harnesses are 'oracle', 'idle'"):
        mixed._route(plugins, {"task_id": "t", "harness": "terminus"})
    with pytest.raises(ConfigError, match="harness None: the mix's harnesses are"):
        mixed._route(plugins, {"task_id": "t"})
    single = TackroomGenerator(RolloutSide.of(TrainConfig.model_validate(
        {"tasks": ["t"], "model": {"path": "m"}, "harness": {"name": "oracle"}, "sandbox": {"name": "local"}})),
        base_url=NOWHERE, run_root=tmp_path / "s")
    assert single._route(single._plugins({}), {"task_id": "t"}).label == "oracle"
    with pytest.raises(ConfigError, match="this run has one \\[harness\\] and no mix"):
        single._route(single._plugins({}), {"task_id": "t", "harness": "oracle"})

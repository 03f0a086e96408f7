"""Training through multi-turn harnesses on the Tinker backend: the token accounting of every trajectory.

The rollout side of ``tackroom train --backend tinker`` is ``TackroomGenerator``
against :class:`SamplingEndpoint` (vLLM's ``/v1/completions`` over a Tinker
sampling client). Here the sampling client is scripted (:class:`ScriptedPolicy`):
it writes a fixed multi-turn episode per harness, as token ids from the real
SmolLM2 tokenizer, with logprobs that depend on the prompt and the position, and
records every call. Nothing else is faked: the real harnesses (``terminus``
through the real policy gateway, ``archipelago`` with its own token accounting on
``/completions``), the local sandbox, the test-script verifier, the generator's
split and masking, and the Tinker datums built from its output.

Each trajectory the trainer consumes must be exactly the sampler's ids: the
whole sequence is the last call's prompt plus what it sampled, every earlier
call's prompt and sample are a prefix of it, the loss mask is 1 exactly on the
sampled ids (tool results, terminal observations, parse-error notices and the
completion check are 0), and the rollout logprobs are the sampler's on those
ids and 0 elsewhere; the datums put each sampled id at its target position.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from skyrl.train.generators.base import TrajectoryID

from tackroom_app import PluginSelection
from tackroom_gateway import EngineClient, EngineRequestError, EngineSettings, load_tokenizer
from tackroom_train.config import TrainConfig, load_train_config
from tackroom_train.generator import TackroomGenerator
from tackroom_train.tinker.datums import batch_from_output, datums, grpo_advantages, mismatch
from tackroom_train.tinker.sampling_endpoint import SamplingEndpoint, constrained_fields, constraint_error

ROOT = Path(__file__).resolve().parents[3]
TRAIN = ROOT / "examples" / "train"


class ScriptedPolicy:
    """``tinker.SamplingClient.sample_async`` writing ``replies[k]`` at the policy's k-th turn of an episode.

    The turn is read off the prompt (how many assistant headers it holds). Logprobs are a
    function of (prompt length, position), so two samples of one prompt are identical and
    any misplaced logprob shows. Liveness probes (greedy, one token asked; the endpoint samples
    16 and cuts) are not recorded in :attr:`calls`.
    """

    def __init__(self, tokenizer, replies: list[str]) -> None:
        self.tokenizer = tokenizer
        self.replies = replies
        self.calls: list[tuple[list[int], list[int], list[float]]] = []

    async def sample_async(self, prompt, num_samples, sampling_params):
        ids = prompt.to_ints()
        if sampling_params.temperature == 0.0:
            return SimpleNamespace(sequences=[SimpleNamespace(tokens=[self.tokenizer.eos_token_id], logprobs=[-0.5],
                                                              stop_reason="length")])
        turn = self.tokenizer.decode(ids).count("<|im_start|>assistant") - 1
        text = self.replies[min(turn, len(self.replies) - 1)]
        tokens = [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]
        tokens = tokens[: sampling_params.max_tokens]
        logprobs = [-0.01 - ((len(ids) * 31 + j * 17) % 97) / 50 for j in range(len(tokens))]
        self.calls.append((list(ids), tokens, logprobs))
        return SimpleNamespace(sequences=[SimpleNamespace(tokens=tokens, logprobs=logprobs, stop_reason="stop")])


def _input(tasks: list[Path], samples: int) -> dict:
    prompts, extras, ids = [], [], []
    for task in tasks:
        for k in range(samples):
            prompts.append([{"role": "user", "content": (task / "instruction.md").read_text()}])
            extras.append({"task_id": task.name, "task_path": str(task)})
            ids.append(TrajectoryID(instance_id=task.name, repetition_id=k))
    return {"prompts": prompts, "env_extras": extras, "trajectory_ids": ids,
            "sampling_params": {"temperature": 1.0, "max_generate_length": 96},
            "batch_metadata": SimpleNamespace(global_step=1)}


async def _rollout(config: TrainConfig, policy: ScriptedPolicy, tasks: list[Path], samples: int, tmp_path: Path):
    tokenizer = policy.tokenizer
    async with SamplingEndpoint(policy, tokenizer, "tackroom-tinker", max_model_len=4096) as endpoint:
        generator = TackroomGenerator(config, base_url=endpoint.base_url, tokenizer=tokenizer, model="tackroom-tinker",
                                      run_root=tmp_path / "rollouts")
        try:
            out = await generator.generate(_input(tasks, samples))
        finally:
            await generator.aclose()
        assert not endpoint.refused
    return out


def _check_exact_tokens(out: dict, policy: ScriptedPolicy, min_turns: int) -> None:
    """Every row is exactly the sampler's ids, masked 1 on what it sampled and nowhere else."""
    assert out["rollout_logprobs"] is not None
    for i, (prompt, response, mask, logprobs) in enumerate(zip(
            out["prompt_token_ids"], out["response_ids"], out["loss_masks"], out["rollout_logprobs"])):
        assert any(mask), f"row {i} is masked: {out['rollout_metrics']}"
        seq = prompt + response
        mine = [c for c in policy.calls if seq[: len(c[0]) + len(c[1])] == c[0] + c[1]]
        assert len(mine) >= min_turns, f"row {i}: {len(mine)} sampler calls extend into it, expected {min_turns}+"
        mine.sort(key=lambda c: len(c[0]))
        assert seq == mine[-1][0] + mine[-1][1], "the sequence is the last call's prompt plus its sample"
        assert prompt == mine[0][0], "the prompt is exactly what the sampler saw first"
        expected_mask = [0] * len(seq)
        expected_lp = [0.0] * len(seq)
        for call_prompt, _tokens, lps in mine:
            for j, lp in enumerate(lps):
                expected_mask[len(call_prompt) + j] = 1
                expected_lp[len(call_prompt) + j] = lp
        assert [0] * len(prompt) + mask == expected_mask, f"row {i}: loss mask is not 1 exactly on sampled ids"
        assert [0.0] * len(prompt) + logprobs == pytest.approx(expected_lp), f"row {i}: logprobs misaligned"
        # between the turns: ids nobody sampled (observations), all masked
        gaps = sum(1 for a, b in zip(mask, mask[1:]) if a == 0 and b == 1)
        assert gaps >= min_turns - 1, f"row {i}: no observation between the turns"

    # the Tinker datums put each sampled id at its target position, with its logprob and weight 1
    groups = [t.instance_id for t in out["trajectory_ids"]]
    masked = [not any(m) for m in out["loss_masks"]]
    batch = batch_from_output(out, grpo_advantages(out["rewards"], groups, masked), groups, "sequence_mean")
    data = datums(batch, with_advantages=True)
    trainer_logprobs = []
    for row, datum in zip(batch.rows, data):
        targets = datum.loss_fn_inputs["target_tokens"].data
        weights = datum.loss_fn_inputs["weights"].data
        sent = datum.loss_fn_inputs["logprobs"].data
        for j, (token, m, lp) in enumerate(zip(row.response_ids, row.mask, row.rollout_logprobs)):
            assert targets[row.start + j] == token and weights[row.start + j] == m
            assert sent[row.start + j] == pytest.approx(lp)
        assert sum(weights) == sum(row.mask)
        trainer_logprobs.append(list(sent))
    assert mismatch(batch, trainer_logprobs)["mismatch_max"] < 1e-6  # float32 datums


TERMINUS_REPLIES = [
    "I will write the answer now.",  # not JSON: a parse-error notice follows (masked)
    '{"analysis": "", "plan": "", "commands": [{"keystrokes": "echo blue > /app/answer.txt\\n", "duration": 0.2}], '
    '"task_complete": true}',  # the terminal's output and the completion check follow (masked)
    '{"analysis": "done", "plan": "", "commands": [], "task_complete": true}',
]


async def test_terminus_through_the_gateway_trains_on_exactly_the_sampled_ids(tmp_path):
    tokenizer = load_tokenizer("smollm2")
    config = load_train_config(TRAIN / "terminus.toml")
    config.harness = PluginSelection(name="terminus", **{**config.harness.options, "max_turns": 4})
    config.rollout.out = str(tmp_path)
    policy = ScriptedPolicy(tokenizer, TERMINUS_REPLIES)
    task = TRAIN / "terminus-tasks" / "echo-blue"
    out = await _rollout(config, policy, [task], 2, tmp_path)
    assert out["rewards"] == [1.0, 1.0] and out["stop_reasons"] == ["stop", "stop"]
    _check_exact_tokens(out, policy, min_turns=3)
    text = tokenizer.decode(out["response_ids"][0])
    assert "could not be used" in text and "Are you sure?" in text, "the observations are in the sequence"


ARCHIPELAGO_REPLIES = [
    '<tool_call>\n{"name": "list_files", "arguments": {}}\n</tool_call>',  # not offered: the harness says so (masked)
    '<tool_call>\n{"name": "final_answer", "arguments": {"answer": "blue"}}\n</tool_call>',
]


async def test_archipelago_own_accounting_trains_on_exactly_the_sampled_ids(tmp_path):
    tokenizer = load_tokenizer("smollm2")
    config = load_train_config(TRAIN / "archipelago.toml")
    config.harness = PluginSelection(name="archipelago",
                                     **{**config.harness.options, "world": str(ROOT / "examples" / "worlds" / "acme")})
    config.rollout.out = str(tmp_path)
    policy = ScriptedPolicy(tokenizer, ARCHIPELAGO_REPLIES)
    task = TRAIN / "overfit-tasks" / "say-blue"
    out = await _rollout(config, policy, [task], 2, tmp_path)
    assert out["rewards"] == [1.0, 1.0] and out["stop_reasons"] == ["stop", "stop"]
    _check_exact_tokens(out, policy, min_turns=2)
    assert "Unknown tool 'list_files'" in tokenizer.decode(out["response_ids"][0]), "the tool result is in the sequence"


# -- constrained decoding: refused, never sampled unconstrained ----------------------------------

def test_constrained_fields() -> None:
    assert constrained_fields({"response_format": {"type": "text"}, "max_tokens": 3}) == []
    assert constrained_fields({"response_format": {"type": "json_schema"}, "structured_outputs": {"json": {}}}) == [
        "response_format", "structured_outputs"]
    message = constraint_error({"structured_outputs": 2})
    assert "structured_outputs (2x)" in message and "structured_outputs = false" in message


async def test_endpoint_refuses_constrained_decoding_and_remembers_it() -> None:
    tokenizer = load_tokenizer("smollm2")
    policy = ScriptedPolicy(tokenizer, ["hi"])
    async with SamplingEndpoint(policy, tokenizer, "tiny", max_model_len=64) as endpoint:
        client = EngineClient(EngineSettings(base_url=endpoint.base_url, retries=0))
        try:
            with pytest.raises(EngineRequestError, match="cannot constrain decoding"):
                await client.complete({"prompt": [1, 2], "max_tokens": 4,
                                       "structured_outputs": {"json": json.dumps({"type": "object"})}})
            done = await client.complete({"prompt": [1, 2], "max_tokens": 4, "response_format": {"type": "text"}})
        finally:
            await client.aclose()
        assert endpoint.refused == {"structured_outputs": 1}
    assert len(policy.calls) == 1 and done.completion_ids == policy.calls[0][1]


def test_multiturn_examples_leave_constrained_decoding_off() -> None:
    terminus = load_train_config(TRAIN / "terminus.toml")
    archipelago = load_train_config(TRAIN / "archipelago.toml")
    assert terminus.backend == archipelago.backend == "tinker"
    assert terminus.harness.name == "terminus" and terminus.harness.options["structured_outputs"] is False
    assert archipelago.harness.name == "archipelago" and archipelago.harness.options["tool_choice"] == "auto"

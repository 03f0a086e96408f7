"""The harness end to end: local sandbox, the real world gateway and MCP servers, the real local vLLM SmolLM2."""

from __future__ import annotations

import pytest

from tackroom import Policy
from tackroom_archipelago import ArchipelagoHarness
from tackroom_gateway import ChatTemplate

pytestmark = pytest.mark.engine


async def test_world_task_with_real_engine_records_a_token_exact_trajectory(engine_url, world_task, sandbox):
    harness = ArchipelagoHarness({
        "max_steps": 3, "tool_choice": "required", "tools_include": ["files_list_directory", "sheets_*"],
        "max_tokens_per_turn": 200, "sampling": {"temperature": 0.0}, "final_answer_tool": False,
    })
    await harness.setup(sandbox, world_task)
    policy = Policy(base_url=engine_url, model="default", tokenizer="smollm2")
    traj = await harness.run(world_task, sandbox, policy)

    assert traj.turns, traj.notes
    # The flattened sequence is exactly the last prompt plus its completion, and each turn extends the one before.
    last = traj.turns[-1]
    assert traj.token_ids[: len(last.prompt_ids)] == last.prompt_ids
    for prev, cur in zip(traj.turns, traj.turns[1:]):
        assert cur.prompt_ids[: len(prev.prompt_ids) + len(prev.completion_ids)] == prev.prompt_ids + prev.completion_ids
    # Loss mask is 1 exactly on generated ids, with their real logprobs.
    generated = sum(len(t.completion_ids) for t in traj.turns)
    assert sum(traj.loss_mask) == generated
    for t in traj.turns:
        start = len(t.prompt_ids)
        assert traj.loss_mask[start : start + len(t.completion_ids)] == [1] * len(t.completion_ids)
        assert traj.token_ids[start : start + len(t.completion_ids)] == t.completion_ids
        assert t.logprobs is not None and traj.logprobs[start : start + len(t.completion_ids)] == t.logprobs
    # Forced tool use made the 135M model call world tools through real MCP.
    assert traj.metrics["tool_calls"] >= 1
    assert traj.metrics["turns"] == len(traj.turns)
    assert traj.stop_reason == "max_turns", traj.messages[-2:]
    assert any(m["role"] == "tool" for m in traj.messages)
    # The rendered conversation says what was sent: the first prompt is the chat template's own render.
    template = ChatTemplate.from_path("smollm2")
    assert "files_list_directory" in template.decode(traj.turns[0].prompt_ids)


async def test_constrained_turns_record_the_models_own_logprobs(engine_url, world_task, sandbox):
    """Under structured outputs vLLM computes logprobs after the grammar's mask (a forced token reads 0.0), which no
    trainer can reproduce; ``constrained_logprobs = "model"`` (the default) records the model's own, re-scored, and
    ``"sampler"`` keeps the engine's. Measured before: a 0.50-nat mean |trainer - rollout| at version 0."""
    import httpx

    options = {"max_steps": 2, "tool_choice": "required", "tools_include": ["files_list_directory"],
               "max_tokens_per_turn": 64, "sampling": {"temperature": 1.0, "seed": 7}, "final_answer_tool": False}
    policy = Policy(base_url=engine_url, model="default", tokenizer="smollm2")
    recorded = {}
    for mode in ("sampler", "model"):
        harness = ArchipelagoHarness({**options, "constrained_logprobs": mode})
        await harness.setup(sandbox, world_task)
        recorded[mode] = await harness.run(world_task, sandbox, policy)
    gap = {}
    async with httpx.AsyncClient(base_url=engine_url, timeout=120) as http:
        for mode, traj in recorded.items():
            diffs = []
            for turn in traj.turns:
                data = (await http.post("completions", json={
                    "model": (await http.get("models")).json()["data"][0]["id"], "max_tokens": 1,
                    "prompt": turn.prompt_ids + turn.completion_ids, "prompt_logprobs": 0})).json()
                own = [entry[str(tok)]["logprob"] for tok, entry in
                       zip(turn.completion_ids, data["choices"][0]["prompt_logprobs"][len(turn.prompt_ids):])]
                diffs += [abs(a - b) for a, b in zip(own, turn.logprobs)]
            gap[mode] = (sum(diffs) / len(diffs), max(diffs))
    assert gap["model"][1] < 0.02, gap           # the same engine, the same weights: equal up to kernel noise
    assert gap["sampler"][1] > 1.0, gap          # the grammar's renormalisation, far from the model's own

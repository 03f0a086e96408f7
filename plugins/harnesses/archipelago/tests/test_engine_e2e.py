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

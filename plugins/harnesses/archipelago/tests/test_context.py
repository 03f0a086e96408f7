"""Context management: summarisation into a new token segment, and head/tail truncation with chosen sizes."""

from __future__ import annotations

import pytest
from archipelago_scripted_engine import FILL, ScriptedEngine, call

from tackroom import Policy
from tackroom_archipelago import ArchipelagoHarness, ArchipelagoOptions
from tackroom_archipelago.context import token_segments
from tackroom_archipelago.observations import truncate

SUMMARY = "SUMMARY: hr/employees.csv lists 24 people; answer 24."
READ = [call("files_list_directory", path="/workspace"), call("files_read_text_file", path="hr/employees.csv")]


async def test_summary_starts_a_new_segment_the_trainer_sees_as_the_model_did(world_task, sandbox):
    harness = ArchipelagoHarness({"max_steps": 6, "tools_include": ["files_*"], "summarize_at": 0.05,
                                  "context_length": 8192, "summary_max_tokens": 200})
    await harness.setup(sandbox, world_task)
    async with ScriptedEngine([*READ, SUMMARY, "24 people."], max_model_len=8192) as engine:
        traj = await harness.run(world_task, sandbox, Policy(base_url=engine.url, model="scripted"))
    assert traj.stop_reason == "completed" and traj.final_answer == "24 people."
    assert traj.metrics["summaries"] == 1.0 and traj.metrics["turns"] == 4.0
    assert [t.branch for t in traj.turns] == [0, 0, 0, 1]
    # The summary turn: asked as a user message, not forced to call a tool, capped.
    ask = engine.template.decode(engine.requests[2]["prompt"])
    assert ask.endswith("Reply with the summary only, without a tool call.<|im_end|>\n<|im_start|>assistant\n")
    assert "structured_outputs" not in engine.requests[2] and engine.requests[2]["max_tokens"] == 200
    # After it, a fresh sequence: system prompt, task, the summary; the earlier turns are gone.
    after = engine.template.decode(engine.requests[3]["prompt"])
    assert after.startswith("<|im_start|>system\n") and world_task.instruction.strip() in after
    assert f"[CONTEXT SUMMARY] Your earlier turns were replaced by your own summary of them:\n\n{SUMMARY}" in after
    assert "id,name,email" not in after and "id,name,email" in ask
    # Flattened tokens are the last segment; every segment is a well-formed sequence of its own.
    last = traj.turns[-1]
    assert traj.token_ids == last.prompt_ids + last.completion_ids
    segments = token_segments(traj.turns)
    assert len(segments) == 2
    ids0, mask0, lps0 = segments[0]
    assert ids0 == traj.turns[2].prompt_ids + traj.turns[2].completion_ids
    assert sum(mask0) == sum(len(t.completion_ids) for t in traj.turns[:3]) and len(lps0) == len(ids0)
    assert segments[1][0] == traj.token_ids and segments[1][1] == traj.loss_mask
    assert any("summarised 1 time" in n for n in traj.notes)
    roles = [m["role"] for m in traj.messages]
    assert roles[-4:] == ["user", "assistant", "user", "assistant"]  # ask, summary, handoff, answer


async def test_through_the_policy_gateway_the_new_segment_is_a_new_branch(world_task, sandbox):
    from tackroom_gateway import EngineSettings, GatewaySettings, PolicyGateway

    harness = ArchipelagoHarness({"max_steps": 6, "tools_include": ["files_*"], "summarize_at": 0.05,
                                  "endpoint": "chat", "summary_max_tokens": 200})
    await harness.setup(sandbox, world_task)
    async with ScriptedEngine([*READ, SUMMARY, "24 people."], max_model_len=8192) as engine:
        settings = GatewaySettings(engine=EngineSettings(base_url=engine.url, retries=0))
        async with PolicyGateway(settings, template=engine.template) as gateway:
            traj = await harness.run(world_task, sandbox, gateway.policy("s1"))
            recorded = gateway.trajectory("s1")
    assert [t.branch for t in traj.turns] == [0, 0, 0, 1] == [t.branch for t in recorded.turns]
    # The harness's flattened tokens are the gateway's newest branch: exact, and only what the model saw last.
    assert traj.token_ids and traj.token_ids == recorded.token_ids and traj.loss_mask == recorded.loss_mask
    assert "id,name,email" not in engine.template.decode(traj.token_ids)


async def test_a_summary_cut_off_by_its_budget_still_hands_over(world_task, sandbox):
    harness = ArchipelagoHarness({"max_steps": 6, "tools_include": ["files_*"], "summarize_at": 0.05,
                                  "context_length": 8192, "summary_max_tokens": 16})
    await harness.setup(sandbox, world_task)
    async with ScriptedEngine([*READ, FILL, "24."], max_model_len=8192) as engine:
        traj = await harness.run(world_task, sandbox, Policy(base_url=engine.url, model="scripted"))
    assert traj.stop_reason == "completed" and [t.branch for t in traj.turns] == [0, 0, 0, 1]
    assert traj.turns[2].finish_reason == "length" and len(traj.turns[2].completion_ids) == 16
    assert "word word" in engine.template.decode(engine.requests[3]["prompt"])


async def test_mercor_truncation_shape_head_and_tail_over_a_token_limit(world_task, sandbox):
    harness = ArchipelagoHarness({"max_steps": 2, "tools_include": ["files_*"], "tool_result_max_chars": 0,
                                  "tool_result_max_tokens": 200, "tool_result_head_chars": 100,
                                  "tool_result_tail_chars": 50})
    await harness.setup(sandbox, world_task)
    async with ScriptedEngine([READ[1], "ok"]) as engine:
        traj = await harness.run(world_task, sandbox, Policy(base_url=engine.url, model="scripted"))
    text = next(m["content"] for m in traj.messages if m["role"] == "tool")
    full = (await sandbox.read_file("/workspace/hr/employees.csv")).decode()
    assert text.startswith(full[:100] + "\n\n[TRUNCATED: the tool returned") and text.endswith(full[-50:])
    assert "showing the first 100 and the last 50" in text and traj.metrics["truncations"] == 1.0


def test_truncation_triggers_and_shapes():
    counts = []

    def count(text: str) -> int:
        counts.append(len(text))
        return len(text) // 2

    assert truncate("x" * 300, None, head_chars=10, tail_chars=5, max_tokens=300, count_tokens=count) == ("x" * 300, False)
    assert counts == []  # no longer than max_tokens characters: never tokenized
    cut, done = truncate("a" * 500 + "z" * 500, None, head_chars=10, tail_chars=5, max_tokens=400, count_tokens=count)
    assert done and cut.startswith("a" * 10 + "\n\n[TRUNCATED") and cut.endswith("z" * 5)
    assert truncate("abc" * 10, 12) [0].startswith("abcabcab\n\n[TRUNCATED")  # the default 2/3 + 1/3 of max_chars


@pytest.mark.parametrize(("options", "message"), [
    ({"tool_result_max_chars": 0, "tool_result_max_tokens": 100}, "needs tool_result_head_chars and"),
    ({"tool_result_max_chars": 100, "tool_result_head_chars": 80, "tool_result_tail_chars": 30}, "exceed"),
    ({"summarize_at": 1.5}, "summarize_at"),
])
def test_bad_context_options_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        ArchipelagoOptions.model_validate(options)

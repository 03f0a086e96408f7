"""Full episodes with a scripted policy through the real world gateway and MCP servers in a local sandbox."""

from __future__ import annotations

import pytest
from archipelago_scripted_engine import FILL, ScriptedEngine, call

import tackroom_app
from tackroom import Policy
from tackroom_archipelago import ArchipelagoHarness
from tackroom_archipelago.errors import ContextExhaustedError

ANSWER = "region,revenue\nEast,209355.00\nNorth,212595.00\nSouth,365550.00\nWest,372435.00\n"


async def test_scripted_policy_solves_a_world_task(world_task, sandbox):
    script = [
        "I will total the Revenue column per region.\n"
        + call("sheets_sum_column", path="finance/q3_sales.xlsx", column="Revenue", group_by="Region"),
        "Now I write the CSV.\n" + call("files_write_text_file", path="/workspace/output/revenue_by_region.csv", content=ANSWER),
        "I wrote /workspace/output/revenue_by_region.csv with the four regions.",
    ]
    harness = ArchipelagoHarness({"max_steps": 5})
    await harness.setup(sandbox, world_task)
    async with ScriptedEngine(script) as engine:
        traj = await harness.run(world_task, sandbox, Policy(base_url=engine.url, model="scripted"))
    assert traj.stop_reason == "completed"
    assert traj.final_answer.startswith("I wrote")
    tool_msgs = [m for m in traj.messages if m["role"] == "tool"]
    assert tool_msgs[0]["content"] == "East,209355\nNorth,212595\nSouth,365550\nWest,372435"
    assert traj.metrics["tool_calls"] == 2 and traj.metrics["tool_call_success_rate"] == 1.0
    assert traj.metrics["tool_calls/sheets_sum_column"] == 1.0
    # Each engine call got exactly the ids so far: the previous prompt, its completion, then the observation delta.
    assert len(engine.requests) == 3
    for prev, cur in zip(traj.turns, traj.turns[1:]):
        assert cur.prompt_ids[: len(prev.prompt_ids) + len(prev.completion_ids)] == prev.prompt_ids + prev.completion_ids
    assert sum(traj.loss_mask) == sum(len(t.completion_ids) for t in traj.turns)
    # The task's own deterministic check grades what the MCP tools wrote.
    reward = await tackroom_app.instantiate("verifier", "test-script").verify(world_task, sandbox, traj)
    assert reward.score == 1.0, reward.details


async def test_truncation_repair_and_budget_nudge_fire(world_task, sandbox):
    script = [
        "<tool_call>\n{\"name\": \"files_read_text_file\", \"arguments\": {\"path\": \n</tool_call>",  # does not parse
        call("files_read_text_file", path="hr/employees.csv"),  # long: truncated, then the context runs low
        "Done.",
    ]
    harness = ArchipelagoHarness({"max_steps": 5, "tool_result_max_chars": 300, "context_length": 1600,
                                  "tools_include": ["files_*"],
                                  "budget_nudge_ratio": 0.45})
    await harness.setup(sandbox, world_task)
    async with ScriptedEngine(script) as engine:
        traj = await harness.run(world_task, sandbox, Policy(base_url=engine.url, model="scripted"))
    m = traj.metrics
    assert (m["parse_repairs"], m["parse_failures"], m["truncations"], m["nudges"]) == (1.0, 1.0, 1.0, 1.0), m
    repair, observation = [x for x in traj.messages if x["role"] == "tool"]
    assert "could not be parsed" in repair["content"]
    assert "[TRUNCATED: the tool returned" in observation["content"]
    assert observation["content"].startswith("id,name,email")
    assert "[SYSTEM NOTICE]" in observation["content"]
    assert traj.stop_reason == "completed"
    # What the model saw is what was recorded: the notice sits in the token stream, masked out.
    decoded = engine.template.decode(traj.turns[-1].prompt_ids)
    assert "[SYSTEM NOTICE]" in decoded and "[TRUNCATED" in decoded


async def test_envelope_tools_are_hoisted_and_rewrapped(world_task, sandbox):
    script = [call("code_run_python", code="import csv; print(len(list(csv.reader(open('hr/employees.csv')))) - 1)"), "24 people."]
    harness = ArchipelagoHarness({"max_steps": 3})
    await harness.setup(sandbox, world_task)
    async with ScriptedEngine(script) as engine:
        traj = await harness.run(world_task, sandbox, Policy(base_url=engine.url, model="scripted"))
    tool = next(x for x in traj.messages if x["role"] == "tool")
    assert tool["content"].startswith("exit code 0") and "24" in tool["content"]
    assert traj.metrics["code_execution_share"] == 1.0
    # The model was shown the flat schema, not the {"request": {...}} envelope.
    first_prompt = engine.template.decode(engine.requests[0]["prompt"])
    assert '"code"' in first_prompt and '"request"' not in first_prompt


async def test_context_limit_ends_the_episode_as_a_model_error(world_task, sandbox):
    harness = ArchipelagoHarness({"max_steps": 3, "tools_include": ["files_*"]})
    await harness.setup(sandbox, world_task)
    async with ScriptedEngine([call("files_list_directory"), FILL], max_model_len=2600) as engine:
        with pytest.raises(ContextExhaustedError) as info:
            await harness.run(world_task, sandbox, Policy(base_url=engine.url, model="scripted"))
    assert info.value.error_class == "model"
    traj = info.value.trajectory
    assert traj.stop_reason == "context_exhausted"
    assert len(traj.token_ids) == 2600 and traj.turns[-1].finish_reason == "length"
    assert sum(traj.loss_mask) == sum(len(t.completion_ids) for t in traj.turns)


async def test_final_answer_is_written_to_answer_path(world_task, sandbox):
    # tool_choice = required offers final_answer; with answer_path its argument lands in a file a verifier grades.
    script = [call("final_answer", answer="  Paris \n")]
    harness = ArchipelagoHarness({"max_steps": 3, "tool_choice": "required", "tools_include": ["none-of-the-world"],
                                  "answer_path": "/app/answer.txt"})
    await harness.setup(sandbox, world_task)
    async with ScriptedEngine(script) as engine:
        traj = await harness.run(world_task, sandbox, Policy(base_url=engine.url, model="scripted"))
    assert traj.stop_reason == "completed" and traj.final_answer.strip() == "Paris"
    assert (await sandbox.read_file("/app/answer.txt")).decode() == "Paris\n"


async def test_no_final_answer_writes_no_answer_file(world_task, sandbox):
    script = [call("files_list_directory", path="/workspace")] * 2
    harness = ArchipelagoHarness({"max_steps": 2, "answer_path": "/app/answer.txt"})
    await harness.setup(sandbox, world_task)
    async with ScriptedEngine(script) as engine:
        traj = await harness.run(world_task, sandbox, Policy(base_url=engine.url, model="scripted"))
    assert traj.stop_reason == "max_turns"
    with pytest.raises(FileNotFoundError):
        await sandbox.read_file("/app/answer.txt")



async def test_a_session_lost_in_the_models_tool_call_is_the_models_failure():
    """A world session that dies in a tool call and does not come back (the model's code may have killed the
    gateway) is ``model``, not ``infra``: retried and then dropped from training, a failing episode would escape
    its 0. (A real kill of the gateway surfaces from the MCP SDK as a CancelledError of the calling task: see the
    README's "Not handled yet".)"""
    import anyio

    from tackroom_archipelago.errors import WorldLostError
    from tackroom_archipelago.mcp_session import WorldMcp

    class DeadClient:
        calls = 0

        async def call_tool(self, name, arguments):
            DeadClient.calls += 1
            raise anyio.ClosedResourceError()

    session = WorldMcp(DeadClient)

    async def reconnect():  # the gateway answers again, its session does not
        session.reconnects += 1
        session.client = DeadClient()

    session.reconnect = reconnect
    session.client = DeadClient()
    with pytest.raises(WorldLostError, match=r"died twice \(tool code_run_python\).*lost in the model's tool call.*"
                       "counted as the model's") as info:
        await session.call("code_run_python", {"code": "..."}, timeout=5)
    assert info.value.error_class == "model" and DeadClient.calls == 2 and session.reconnects == 1

"""Toolbelt mode: meta-tools only in the prompt, world tools added by the model, a todo list, final_answer refused
while todos are open, and a token sequence that only grows."""

from __future__ import annotations

import json

import pytest
from archipelago_scripted_engine import ScriptedEngine, call

from tackroom import ConfigError, Policy, TaskError
from tackroom_archipelago import ArchipelagoHarness
from tackroom_archipelago.toolbelt import META_TOOLS, Toolbelt


async def test_the_model_adds_a_tool_keeps_todos_and_finishes_when_they_are_done(pictures_task, pictures_sandbox):
    script = [
        call("toolbelt_list_tools"),
        call("pics_read_image", path="animals/fox.png"),  # not added yet: refused, told how
        call("toolbelt_add_tool", tool_name="pics_read_image"),
        call("todo_write", todos=[{"id": "1", "content": "look at fox.png", "status": "in_progress"}]),
        call("final_answer", answer="too early"),  # refused: a todo is open
        call("pics_read_image", path="animals/fox.png"),
        call("todo_write", todos=[{"id": "1", "status": "completed"}], merge=True),
        call("final_answer", answer="animals/fox.png", status="completed"),
    ]
    harness = ArchipelagoHarness({"max_steps": 10, "toolbelt": True, "tool_choice": "required",
                                  "answer_path": "/app/answer.txt"})
    await harness.setup(pictures_sandbox, pictures_task)
    async with ScriptedEngine(script) as engine:
        traj = await harness.run(pictures_task, pictures_sandbox, Policy(base_url=engine.url, model="scripted"))
    assert traj.stop_reason == "completed" and traj.final_answer == "animals/fox.png"
    results = [m["content"] for m in traj.messages if m["role"] == "tool"]
    assert results[0].startswith("4 tools can be added:\n")
    assert "\n- pics_read_image: Read a PNG under the world's folder and return it as an image." in results[0]
    assert results[1] == "Tool 'pics_read_image' is not in your toolbelt: add it with toolbelt_add_tool first."
    assert results[2].startswith("Added pics_read_image to your toolbelt. You can call it now. Its definition:\n")
    assert json.loads(results[2].split("\n", 1)[1])["name"] == "pics_read_image"
    assert results[3] == "Your todos:\n- [in_progress] 1: look at fox.png"
    assert results[4].startswith("Refused: 1 todo(s) are still open:\n- [in_progress] 1: look at fox.png")
    assert results[5].startswith("animals/fox.png:\n[image image/png")
    assert results[6] == "Your todos:\n- [completed] 1: look at fox.png"
    m = traj.metrics
    assert (m["final_answer_refusals"], m["toolbelt_added"], m["todos_open"]) == (1.0, 1.0, 0.0)
    assert m["tool_errors/unknown_tool"] == 1.0 and m["tool_errors/refused"] == 1.0
    # The prompt listed the meta-tools only; the added tool's definition came as a result, so every prompt extends
    # the one before and the loss mask covers exactly the model's own tokens.
    first = engine.template.decode(engine.requests[0]["prompt"])
    assert '"name": "toolbelt_add_tool"' in first and "pics_read_image" not in first
    for prev, cur in zip(traj.turns, traj.turns[1:]):
        assert cur.prompt_ids[: len(prev.prompt_ids) + len(prev.completion_ids)] == prev.prompt_ids + prev.completion_ids
    assert traj.token_ids == traj.turns[-1].prompt_ids + traj.turns[-1].completion_ids
    assert sum(traj.loss_mask) == sum(len(t.completion_ids) for t in traj.turns)
    # Forced turns may call what is in the toolbelt: the constraint grew when the tool was added.
    tags = [r.get("structured_outputs", {}).get("structural_tag", "") for r in engine.requests]
    assert "pics_read_image" not in tags[2] and "pics_read_image" in tags[3]
    assert (await pictures_sandbox.read_file("/app/answer.txt")).decode() == "animals/fox.png\n"


async def test_a_plain_answer_with_open_todos_is_refused_too(pictures_task, pictures_sandbox):
    script = [call("todo_write", todos=[{"id": "a", "content": "check", "status": "pending"}]), "I am done.",
              call("todo_write", todos=[{"id": "a", "status": "cancelled"}], merge=True), "Done now."]
    harness = ArchipelagoHarness({"max_steps": 6, "toolbelt": True})
    await harness.setup(pictures_sandbox, pictures_task)
    async with ScriptedEngine(script) as engine:
        traj = await harness.run(pictures_task, pictures_sandbox, Policy(base_url=engine.url, model="scripted"))
    assert traj.final_answer == "Done now." and traj.metrics["final_answer_refusals"] == 1.0
    refusal = next(m for m in traj.messages if m["role"] == "user" and "Refused" in str(m["content"]))
    assert "- [pending] a: check" in refusal["content"]


def test_meta_tool_mistakes_are_told_to_the_model():
    belt = Toolbelt([{"type": "function", "function": {"name": "files_read", "description": "Read.", "parameters": {}}}])
    assert belt.handle("toolbelt_add_tool", {}).kind == "bad_arguments"
    missing = belt.handle("toolbelt_add_tool", {"tool_name": "files_reed"})
    assert missing.kind == "unknown_tool" and "Did you mean files_read?" in missing.text
    assert belt.handle("toolbelt_remove_tool", {"tool_name": "files_read"}).kind == "not_added"
    bad = belt.handle("todo_write", {"todos": [{"id": "1", "status": "doing"}]})
    assert bad.kind == "bad_arguments" and bad.text.startswith("todo_write rejected (list unchanged): status:")
    assert belt.todos == []
    assert belt.handle("todo_write", {"todos": "do it"}).kind == "bad_arguments"
    assert belt.handle("todo_write", {"todos": [{"id": str(i), "status": "pending"} for i in range(101)]}).kind == "bad_arguments"
    assert belt.handle("toolbelt_add_tool", {"tool_name": "files_read"}).ok
    assert belt.handle("toolbelt_add_tool", {"tool_name": "files_read"}).text == "files_read is already in your toolbelt."
    assert belt.prompt_tools() == META_TOOLS + [belt.available["files_read"]]
    assert belt.handle("toolbelt_remove_tool", {"tool_name": "files_read"}).ok and not belt.callable("files_read")


def test_a_world_tool_named_like_a_meta_tool_is_a_task_error():
    with pytest.raises(TaskError, match="named like toolbelt meta-tools \\(todo_write\\)"):
        Toolbelt([{"type": "function", "function": {"name": "todo_write", "parameters": {}}}])


async def test_toolbelt_with_required_tool_choice_on_a_chat_endpoint_is_a_config_error(pictures_task, pictures_sandbox):
    harness = ArchipelagoHarness({"toolbelt": True, "tool_choice": "required", "endpoint": "chat"})
    await harness.setup(pictures_sandbox, pictures_task)
    with pytest.raises(ConfigError, match="toolbelt with tool_choice = 'required' on the chat endpoint"):
        await harness.run(pictures_task, pictures_sandbox, Policy(base_url="http://127.0.0.1:9/v1", model="x"))


async def test_through_the_policy_gateway_adding_a_tool_keeps_one_branch(pictures_task, pictures_sandbox):
    from tackroom_gateway import EngineSettings, GatewaySettings, PolicyGateway

    script = [call("toolbelt_add_tool", tool_name="pics_read_image"), call("pics_read_image", path="animals/cat.png"),
              call("final_answer", answer="blue")]
    harness = ArchipelagoHarness({"max_steps": 4, "toolbelt": True, "endpoint": "chat"})
    await harness.setup(pictures_sandbox, pictures_task)
    async with ScriptedEngine(script) as engine:
        settings = GatewaySettings(engine=EngineSettings(base_url=engine.url, retries=0))
        async with PolicyGateway(settings, template=engine.template) as gateway:
            traj = await harness.run(pictures_task, pictures_sandbox, gateway.policy("b1"))
            recorded = gateway.trajectory("b1")
    assert traj.final_answer == "blue" and traj.metrics["tool_success_rate/pics_read_image"] == 1.0
    # The chat `tools` field stayed the meta-tools, so every turn extended the last: one branch, exact tokens.
    assert [t.branch for t in recorded.turns] == [0, 0, 0]
    assert traj.token_ids and traj.token_ids == recorded.token_ids
    assert '"name": "pics_read_image"' not in engine.template.decode(engine.requests[0]["prompt"])

"""The lookup family (examples/worlds/lookup) through archipelago: the world's stdio MCP server (a real SDK server
started as `python3 -m lookup_mcp.files`, which imports `mcp` only because the gateway passes PYTHONPATH on), the
task's own tools ([world] tools_include) and answer path ([answer] path), with a scripted policy."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from archipelago_scripted_engine import ScriptedEngine, call

import tackroom_app
from tackroom import Policy, TaskError, load_task
from tackroom_app import sandbox_spec
from tackroom_archipelago import ArchipelagoHarness
from tackroom_local import LocalSandboxProvider

REPO = Path(__file__).resolve().parents[4]
HELDOUT = REPO / "examples" / "worlds" / "lookup" / "heldout"


def expected(task_dir: Path) -> str:
    return re.search(r'expected="(\w+)"', (task_dir / "tests" / "test.sh").read_text()).group(1)


@pytest.fixture
async def read_task_sandbox():
    task = load_task(HELDOUT / "tasks" / "read-2-00")
    box = LocalSandboxProvider().create(sandbox_spec(task, "lookup-test"))
    await box.start()
    try:
        yield task, box
    finally:
        await box.stop()


async def test_a_lookup_task_is_solved_through_the_stdio_server_with_its_own_tools_and_answer_path(read_task_sandbox):
    task, sandbox = read_task_sandbox
    path = re.search(r"/workspace/notes/\w+\.txt", task.instruction).group(0)
    code = expected(task.path)
    script = [
        call("files_grep", text="code"),                                # not offered by this task: refused
        call("files_read_file", path="/workspace/../../etc/passwd"),     # outside the world: refused by the server
        call("files_read_file", path=path),
        code,
    ]
    harness = ArchipelagoHarness({"max_steps": 5})  # no answer_path, no tools_include: the task says them
    await harness.setup(sandbox, task)
    assert "3 tools" in harness.setup_notes[0]      # the world's server listed all its tools
    async with ScriptedEngine(script) as engine:
        traj = await harness.run(task, sandbox, Policy(base_url=engine.url, model="scripted"))
    first_prompt = engine.template.decode(engine.requests[0]["prompt"])
    assert "files_read_file" in first_prompt and "files_grep" not in first_prompt
    unknown, outside, found = [m["content"] for m in traj.messages if m["role"] == "tool"]
    assert unknown.startswith("Unknown tool 'files_grep'; the tools are: files_read_file")
    assert "outside /workspace" in outside and "root:" not in outside
    assert found.strip() == code
    assert traj.final_answer == code and traj.metrics["tool_calls"] == 3
    assert (await sandbox.exec("cat /app/answer.txt")).stdout.strip() == code
    reward = await tackroom_app.instantiate("verifier", "test-script").verify(task, sandbox, traj)
    assert reward.score == 1.0, reward.details


async def test_a_tools_include_that_matches_nothing_fails_the_trial_as_a_task_error(tmp_path, read_task_sandbox):
    _, sandbox = read_task_sandbox
    world = tmp_path / "world"
    shutil.copytree(HELDOUT, world, ignore=shutil.ignore_patterns("tasks"))
    task_dir = world / "tasks" / "typo"
    shutil.copytree(HELDOUT / "tasks" / "read-2-00", task_dir)
    toml = (task_dir / "task.toml").read_text().replace('tools_include = ["files_read_file"]',
                                                        'tools_include = ["files_readfile"]')
    (task_dir / "task.toml").write_text(toml)
    task = load_task(task_dir)
    harness = ArchipelagoHarness({"max_steps": 2})
    await harness.setup(sandbox, task)
    async with ScriptedEngine(["never asked"]) as engine:
        with pytest.raises(TaskError, match=r"tools_include \['files_readfile'\] match\(es\) none of the world's "
                                            r"tools; they are: files_grep, files_list_directory, files_read_file"):
            await harness.run(task, sandbox, Policy(base_url=engine.url, model="scripted"))
        assert engine.requests == []


def forced_names(tag) -> list[str]:
    """The tool names a structural tag lets the model call (from its const_string prefixes)."""
    if isinstance(tag, dict):
        found = re.findall(r'"name": "(\w+)"', tag["value"]) if tag.get("type") == "const_string" else []
        return found + [n for v in tag.values() for n in forced_names(v)]
    return [n for v in tag for n in forced_names(v)] if isinstance(tag, list) else []


async def test_answer_on_last_step_lets_the_last_turn_call_only_final_answer(read_task_sandbox):
    task, sandbox = read_task_sandbox
    path = re.search(r"/workspace/notes/\w+\.txt", task.instruction).group(0)
    code = expected(task.path)
    script = [call("files_read_file", path=path), call("files_read_file", path=path), call("final_answer", answer=code)]
    harness = ArchipelagoHarness({"max_steps": 3, "tool_choice": "required", "answer_on_last_step": True})
    await harness.setup(sandbox, task)
    async with ScriptedEngine(script) as engine:
        traj = await harness.run(task, sandbox, Policy(base_url=engine.url, model="scripted"))
    offered = [forced_names(json.loads(r["structured_outputs"]["structural_tag"])) for r in engine.requests]
    assert sorted(set(offered[0])) == ["files_read_file", "final_answer"] and offered[1] == offered[0]
    assert set(offered[2]) == {"final_answer"}     # the last step: only final_answer
    assert "You read this file before" in [m for m in traj.messages if m["role"] == "tool"][1]["content"]
    assert traj.stop_reason == "completed" and traj.final_answer == code
    assert (await sandbox.exec("cat /app/answer.txt")).stdout.strip() == code

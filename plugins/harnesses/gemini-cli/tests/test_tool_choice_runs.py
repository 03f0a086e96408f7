"""The real Gemini CLI with ``tool_choice = "required"`` and a turn limit: every model call is sampled under the
tools' grammar, and an episode that stops at the CLI's own turn limit is a normal end, graded on what it did."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tackroom_agent_kit.testing import ScriptedEngineForTests, serve, tool_call
from tackroom_app import RunConfig, run_config

HELLO = Path(__file__).resolve().parents[4] / "examples" / "tasks" / "hello-file"
SOLVE = tool_call("write_file", file_path="/app/greeting.txt", content="Hello, tackroom!\n")
IDLE = tool_call("run_shell_command", command="true", description="nothing")


def config(tmp_path: Path, engine_url: str, **harness) -> RunConfig:
    return RunConfig.model_validate({
        "tasks": [str(HELLO)],
        "harness": {"name": "gemini-cli", **harness},
        "sandbox": {"name": "local"},
        "policy": {"base_url": engine_url, "tokenizer": "smollm2", "sampling": {"temperature": 0.0, "max_tokens": 256}},
        "runtime": {"out": str(tmp_path / "runs"), "attempts": 1},
    })


@pytest.mark.parametrize("tool_choice", ["auto", "required"])
async def test_an_episode_stopped_at_the_turn_limit_is_graded(tmp_path, smollm2_tokenizer, gemini_cli_install,
                                                              tool_choice):
    # The answer is written on the first turn; the model then never stops calling tools.
    engine = ScriptedEngineForTests(smollm2_tokenizer, replies=[SOLVE], default=IDLE)
    async with serve(engine.app()) as url:
        run_dir, results, _ = await run_config(config(tmp_path, url, max_turns=2, tool_choice=tool_choice),
                                               progress=False, run_id="r")
    (result,) = results
    assert result.error is None, result.error
    assert result.reward == 1.0
    traj = json.loads((run_dir / result.trial_id / "trajectory.json").read_text())
    assert traj["stop_reason"] == "max_turns"
    assert len(engine.bodies) == 2
    grammars = [b.get("structured_outputs") is not None for b in engine.bodies]
    assert grammars == ([True, True] if tool_choice == "required" else [False, False])


WORLD_TASKS = Path(__file__).resolve().parents[4] / "examples" / "worlds" / "lookup" / "train-warm"


async def test_a_worlds_files_outside_the_workspace_can_be_read(tmp_path, smollm2_tokenizer, gemini_cli_install):
    """A world task's files are mounted at /workspace, outside the CLI's workspace (/app): its read_file refused them
    ("Path not in workspace") until the mount joined the workspace (--include-directories)."""
    code = (WORLD_TASKS / "files" / "notes" / "thistle.txt").read_text().strip()
    engine = ScriptedEngineForTests(smollm2_tokenizer, replies=[
        tool_call("read_file", file_path="/workspace/notes/thistle.txt"),
        tool_call("write_file", file_path="/app/answer.txt", content=code)])
    cfg = config(tmp_path, "http://unused", max_turns=2, tool_choice="required", profile="compact",
                 tools=["read_file", "write_file"]).model_dump()
    cfg["tasks"] = [str(WORLD_TASKS / "tasks" / "read-5-00")]
    async with serve(engine.app()) as url:
        cfg["policy"]["base_url"] = url
        run_dir, results, _ = await run_config(RunConfig.model_validate(cfg), progress=False, run_id="r")
    (result,) = results
    assert "Path not in workspace" not in engine.prompts[1] and code in engine.prompts[1]
    assert result.error is None and result.reward == 1.0

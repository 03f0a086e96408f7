"""The real Claude Code in a real local sandbox, through the real gateway's Messages dialect, with chosen replies."""

from __future__ import annotations

from pathlib import Path

import pytest

from tackroom import SandboxSpec, load_task, testing
from tackroom_agent_kit.testing import ScriptedEngineForTests, scripted_gateway, tool_call
from tackroom_claude_code.harness import ClaudeCodeHarness
from tackroom_local import LocalSandboxProvider


def write_task(root: Path, name: str, *, instruction: str, test_sh: str, timeout_sec: float = 120) -> Path:
    """A Harbor-style task directory."""
    return testing.write_task(root, name, instruction=instruction, test_sh=test_sh, agent_timeout_sec=timeout_sec)

pytestmark = pytest.mark.slow  # boots the real Claude Code in a local sandbox


async def test_a_scripted_episode_becomes_the_trajectory_and_the_session_records_each_turn(tmp_path, smollm2_tokenizer,
                                                                                          claude_install):
    task = load_task(write_task(tmp_path, "t", instruction="Create /app/hello.txt containing hello.",
                                test_sh="exit 0\n", timeout_sec=120))
    engine = ScriptedEngineForTests(smollm2_tokenizer, replies=[
        tool_call("Bash", command="mkdir -p /app && echo hello > /app/hello.txt && cat /app/hello.txt",
                  description="write the file"),
        "Created /app/hello.txt.",
    ])
    async with scripted_gateway(engine) as gateway:
        policy = gateway.policy("s", sampling={"max_tokens": 64})
        sandbox = LocalSandboxProvider().create(SandboxSpec(name="claude-scripted", memory_mb=2048))
        await sandbox.start()
        try:
            harness = ClaudeCodeHarness({"profile": "compact"})
            await harness.setup(sandbox, task)
            trajectory = await harness.run(task, sandbox, policy)
            written = (await sandbox.read_file("/app/hello.txt")).decode()
        finally:
            await sandbox.stop()
        recorded = gateway.trajectory("s")
    assert written == "hello\n"
    assert trajectory.stop_reason == "completed" and trajectory.final_answer == "Created /app/hello.txt."
    assistant = [m for m in trajectory.messages if m["role"] == "assistant"]
    assert len(assistant) == 2 == len(engine.prompts)
    (call,) = assistant[0]["tool_calls"]
    assert call["function"]["name"] == "Bash"
    tool = trajectory.messages[2]
    assert tool["role"] == "tool" and tool["content"] == "hello" and tool["is_error"] is False
    assert trajectory.metrics["turns"] == 2 and trajectory.metrics["tool_calls.Bash"] == 1
    assert any("profile compact" in n for n in trajectory.notes)
    # the engine saw Claude Code's conversation: the compact prompt, the instruction, then the tool's output
    assert "You are Claude Code, a coding agent" in engine.prompts[0]
    assert "Create /app/hello.txt containing hello." in engine.prompts[0] and "hello" in engine.prompts[1]
    # the gateway's session recorded both turns token-exactly, one branch: Claude Code's requests extend each other
    assert len(recorded.turns) == 2
    last = recorded.turns[-1]
    assert recorded.token_ids == last.prompt_ids + last.completion_ids
    assert recorded.token_ids[: len(recorded.turns[0].prompt_ids)] == recorded.turns[0].prompt_ids

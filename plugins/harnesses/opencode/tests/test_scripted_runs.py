"""The real OpenCode, driven end to end by `tackroom run`'s machinery against a scripted model behind the real gateway."""

from __future__ import annotations

import json

import pytest
from opencode_tasks import EXAMPLES

from tackroom_agent_kit.testing import ScriptedEngineForTests, serve, tool_call
from tackroom_app import RunConfig, run_config

SOLVE_HELLO = tool_call("bash", command="printf 'Hello, tackroom!\\n' > /app/greeting.txt", description="write the greeting")


def config(tmp_path, engine_url: str, sandbox: str, **harness) -> RunConfig:
    return RunConfig.model_validate({
        "tasks": [str(EXAMPLES / "hello-file")],
        "harness": {"name": "opencode", **harness},
        "sandbox": {"name": sandbox},
        "policy": {"base_url": engine_url, "tokenizer": "smollm2", "sampling": {"temperature": 0.0, "max_tokens": 256}},
        "runtime": {"out": str(tmp_path / "runs"), "attempts": 1},
    })


async def solve_hello_file(tmp_path, smollm2_tokenizer, sandbox: str):
    engine = ScriptedEngineForTests(smollm2_tokenizer, replies=[SOLVE_HELLO, "Created /app/greeting.txt."])
    async with serve(engine.app()) as url:
        run_dir, results, _ = await run_config(config(tmp_path, url, sandbox), progress=False, run_id="r")
    (result,) = results
    assert result.error is None, result.error
    assert result.reward == 1.0
    traj = json.loads((run_dir / result.trial_id / "trajectory.json").read_text())
    return engine, result, traj


def check_episode(engine, result, traj) -> None:
    # Two model calls, both extending one token history (OpenCode did not rewrite the conversation).
    assert len(engine.prompts) == 2 and len(traj["turns"]) == 2
    assert {t["branch"] for t in traj["turns"]} == {0}
    first, second = traj["turns"]
    assert second["prompt_ids"][: len(first["prompt_ids"]) + len(first["completion_ids"])] == first["prompt_ids"] + first["completion_ids"]
    assert traj["token_ids"] == second["prompt_ids"] + second["completion_ids"]
    assert sum(traj["loss_mask"]) == len(first["completion_ids"]) + len(second["completion_ids"])
    # The tool result OpenCode sent back is in the second prompt, as the model saw it.
    assert "<tool_response>" in engine.prompts[1] or "tool" in engine.prompts[1]
    # Messages rebuilt from OpenCode's events.
    roles = [m["role"] for m in traj["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    call = traj["messages"][1]["tool_calls"][0]["function"]
    assert call["name"] == "bash" and "greeting.txt" in json.loads(call["arguments"])["command"]
    assert traj["messages"][2]["is_error"] is False
    assert traj["final_answer"] == "Created /app/greeting.txt."
    assert traj["stop_reason"] == "completed"
    assert result.metrics["turns"] == 2 and result.metrics["tool_calls.bash"] == 1
    assert result.metrics["code_call_share"] == 1.0 and result.metrics["output_tokens_per_turn"] > 0
    assert not any("network access" in n for n in result.notes)  # no network: one forwarded port


async def test_scripted_episode_in_the_local_sandbox(tmp_path, smollm2_tokenizer, opencode_install):
    engine, result, traj = await solve_hello_file(tmp_path, smollm2_tokenizer, "local")
    check_episode(engine, result, traj)
    # OpenCode's own system prompt and tools (the scripted engine serves a 32k context: profile full).
    assert "You are opencode" in engine.prompts[0] and '"name": "grep"' in engine.prompts[0]


@pytest.mark.docker
async def test_scripted_episode_in_docker(tmp_path, smollm2_tokenizer, opencode_install, docker_ready):
    engine, result, traj = await solve_hello_file(tmp_path, smollm2_tokenizer, "docker")
    check_episode(engine, result, traj)


async def test_a_call_that_must_be_a_tool_call_is_not_told_to_answer_in_text(tmp_path, smollm2_tokenizer, opencode_install):
    """``tool_choice = "required"``: OpenCode's last-step notice ("MAXIMUM STEPS REACHED … text only") would
    contradict it, so OpenCode gets a step more and the relay ends the episode at max_turns."""
    engine = ScriptedEngineForTests(smollm2_tokenizer, replies=[
        tool_call("read", filePath="/app/missing.txt"),
        tool_call("write", filePath="/app/greeting.txt", content="Hello, tackroom!\n"),
        "never asked for"])
    async with serve(engine.app()) as url:
        cfg = config(tmp_path, url, "local", tools=["read", "write"], tool_choice="required", max_turns=2,
                     profile="compact")
        run_dir, results, _ = await run_config(cfg, progress=False, run_id="r")
    (result,) = results
    assert result.error is None and result.reward == 1.0
    assert len(engine.prompts) == 2 and not any("MAXIMUM STEPS" in p for p in engine.prompts)
    traj = json.loads((run_dir / result.trial_id / "trajectory.json").read_text())
    assert traj["stop_reason"] == "max_turns" and len(traj["turns"]) == 2

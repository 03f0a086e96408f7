"""The real Codex, driven end to end by `tackroom run`'s machinery against a scripted model behind the real gateway
(its Responses dialect)."""

from __future__ import annotations

import json
from pathlib import Path

from tackroom_agent_kit.testing import ScriptedEngineForTests, serve, tool_call
from tackroom_app import RunConfig, run_config

EXAMPLES = Path(__file__).resolve().parents[4] / "examples" / "tasks"

SOLVE_HELLO = tool_call("exec_command", cmd="printf 'Hello, tackroom!\\n' > /app/greeting.txt")


def config(tmp_path, engine_url: str, **harness) -> RunConfig:
    return RunConfig.model_validate({
        "tasks": [str(EXAMPLES / "hello-file")],
        "harness": {"name": "codex", **harness},
        "sandbox": {"name": "local"},
        "policy": {"base_url": engine_url, "tokenizer": "smollm2", "sampling": {"temperature": 0.0, "max_tokens": 256}},
        "runtime": {"out": str(tmp_path / "runs"), "attempts": 1},
    })


async def test_scripted_episode_in_the_local_sandbox(tmp_path, smollm2_tokenizer, codex_install):
    engine = ScriptedEngineForTests(smollm2_tokenizer, replies=[SOLVE_HELLO, "Created /app/greeting.txt."])
    async with serve(engine.app()) as url:
        run_dir, results, _ = await run_config(config(tmp_path, url), progress=False, run_id="r")
    (result,) = results
    assert result.error is None, result.error
    assert result.reward == 1.0
    traj = json.loads((run_dir / result.trial_id / "trajectory.json").read_text())
    # Two model calls, both extending one token history (Codex did not rewrite the conversation).
    assert len(engine.prompts) == 2 and len(traj["turns"]) == 2
    first, second = traj["turns"]
    assert second["prompt_ids"][: len(first["prompt_ids"]) + len(first["completion_ids"])] == (
        first["prompt_ids"] + first["completion_ids"])
    assert traj["token_ids"] == second["prompt_ids"] + second["completion_ids"]
    # Codex's own system prompt (the scripted engine serves a 32k context: profile full), only function tools.
    assert "You are a coding agent running in the Codex CLI" in engine.prompts[0]
    assert '"name": "exec_command"' in engine.prompts[0] and "\"name\": \"apply_patch\"" not in engine.prompts[0]
    # Messages rebuilt from Codex's events.
    assert [m["role"] for m in traj["messages"]] == ["user", "assistant", "tool", "assistant"]
    call = traj["messages"][1]["tool_calls"][0]["function"]
    assert call["name"] == "exec_command" and "greeting.txt" in json.loads(call["arguments"])["cmd"]
    assert traj["messages"][2]["is_error"] is False
    assert traj["final_answer"] == "Created /app/greeting.txt." and traj["stop_reason"] == "completed"
    assert result.metrics["turns"] == 2 and result.metrics["tool_calls.exec_command"] == 1
    assert result.metrics["code_call_share"] == 1.0
    assert any("profile full (context 32768)" in n for n in result.notes), result.notes

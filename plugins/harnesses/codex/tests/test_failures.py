"""How Codex's failures reach the trial: hangs, crashes, a killed agent, the turn limit, a failing endpoint.

Each test runs the real Codex in a real local sandbox against the real gateway (its Responses dialect) in front of a
scripted engine (replies, delays and failures chosen per test: SmolLM2 cannot be made to fail on demand).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from tackroom import SandboxSpec, load_task, testing
from tackroom_agent_kit.testing import (
    EngineFailureForTests,
    Later,
    ScriptedEngineForTests,
    agent_processes,
    scripted_gateway,
    tool_call,
)
from tackroom_codex.errors import CodexCrashError, CodexModelError
from tackroom_codex.harness import CodexHarness
from tackroom_local import LocalSandboxProvider


def write_task(root: Path, name: str, *, instruction: str, test_sh: str, timeout_sec: float = 120) -> Path:
    """A Harbor-style task directory."""
    return testing.write_task(root, name, instruction=instruction, test_sh=test_sh, agent_timeout_sec=timeout_sec)

pytestmark = pytest.mark.slow  # each test boots the real Codex in a local sandbox


@contextlib.asynccontextmanager
async def prepared(tmp_path, engine, *, timeout_sec=60, memory_mb=2048, **options):
    """Codex set up for a small task in a started local sandbox: (harness, task, sandbox, the gateway's policy)."""
    task = load_task(write_task(tmp_path, "t", instruction="Say hi.", test_sh="exit 0\n", timeout_sec=timeout_sec))
    async with scripted_gateway(engine) as gateway:
        sandbox = LocalSandboxProvider().create(SandboxSpec(name="codex-failure", memory_mb=memory_mb))
        await sandbox.start()
        try:
            harness = CodexHarness(options)
            await harness.setup(sandbox, task)
            yield harness, task, sandbox, gateway.policy("s", sampling={"max_tokens": 64})
        finally:
            await sandbox.stop()


async def test_a_plain_answer_is_one_turn(tmp_path, smollm2_tokenizer, codex_install):
    engine = ScriptedEngineForTests(smollm2_tokenizer, replies=["Hi."])
    async with prepared(tmp_path, engine) as (harness, task, sandbox, policy):
        trajectory = await harness.run(task, sandbox, policy)
    assert trajectory.final_answer == "Hi." and trajectory.stop_reason == "completed"
    assert [m["role"] for m in trajectory.messages] == ["user", "assistant"] and len(engine.prompts) == 1


async def test_the_turn_limit_ends_the_episode(tmp_path, smollm2_tokenizer, codex_install):
    engine = ScriptedEngineForTests(smollm2_tokenizer, default=tool_call("exec_command", cmd="true"))
    async with prepared(tmp_path, engine, max_turns=2) as (harness, task, sandbox, policy):
        trajectory = await harness.run(task, sandbox, policy)
        assert await agent_processes(sandbox) == ""
    assert trajectory.stop_reason == "max_turns" and len(engine.prompts) == 2
    assert trajectory.metrics["tool_calls.exec_command"] == 2


async def test_an_agent_that_kills_codex_gets_no_retry(tmp_path, smollm2_tokenizer, codex_install):
    # The agent's command kills Codex itself: counted as the model's, since as infra the trial would be retried
    # and, still failing, dropped from training (a way out of its 0).
    engine = ScriptedEngineForTests(smollm2_tokenizer, replies=[
        tool_call("exec_command", cmd="pkill -KILL -x codex; sleep 5")], default="Done.")
    async with prepared(tmp_path, engine) as (harness, task, sandbox, policy):
        with pytest.raises(CodexModelError, match=r"killed by SIGKILL .*after 1 model reply whose tool calls run") as info:
            await harness.run(task, sandbox, policy)
        assert await agent_processes(sandbox) == ""
    assert info.value.error_class == "model" and info.value.trajectory.stop_reason == "codex_crashed"


async def test_no_progress_after_a_reply_is_a_hang_counted_as_the_models(tmp_path, smollm2_tokenizer, codex_install):
    # Codex waits on the agent's command that stopped it (SIGSTOP): nothing is written, no model call is in flight.
    engine = ScriptedEngineForTests(smollm2_tokenizer, replies=[
        tool_call("exec_command", cmd="pkill -STOP -x codex")], default="Done.")
    async with prepared(tmp_path, engine, hang_timeout_sec=8) as (harness, task, sandbox, policy):
        with pytest.raises(CodexModelError, match="no progress for 8s.*after 1 model reply") as info:
            await harness.run(task, sandbox, policy)
        assert await agent_processes(sandbox) == ""
    assert info.value.trajectory.stop_reason == "hang"


async def test_a_crash_at_start_up_is_infra_with_codexs_stderr(tmp_path, smollm2_tokenizer, codex_install):
    engine = ScriptedEngineForTests(smollm2_tokenizer, default="hi")
    # A config key Codex does not know: `--strict-config` makes it exit 1 before any model call.
    async with prepared(tmp_path, engine, env={"CODEX_HOME": "/opt/codex/broken"}) as (harness, task, sandbox, policy):
        await sandbox.exec("mkdir -p /opt/codex/broken && echo 'no_such_key = 1' > /opt/codex/broken/config.toml",
                           timeout=30)
        with pytest.raises(CodexCrashError, match="exited with status 1 before its first turn") as info:
            await harness.run(task, sandbox, policy)
    assert "no_such_key" in str(info.value) and info.value.error_class == "infra"
    assert engine.prompts == []


async def test_a_failing_endpoint_is_infra(tmp_path, smollm2_tokenizer, codex_install):
    engine = ScriptedEngineForTests(smollm2_tokenizer, default=EngineFailureForTests(503, "engine down"))
    async with prepared(tmp_path, engine, max_model_errors=2) as (harness, task, sandbox, policy):
        with pytest.raises(CodexCrashError, match="failed [0-9]+ calls") as info:
            await harness.run(task, sandbox, policy)
        assert await agent_processes(sandbox) == ""
    assert info.value.error_class == "infra" and info.value.trajectory.stop_reason == "endpoint_failing"


async def test_a_slow_model_is_not_a_hang(tmp_path, smollm2_tokenizer, codex_install):
    engine = ScriptedEngineForTests(smollm2_tokenizer, replies=[Later("Hi.", 15)])
    async with prepared(tmp_path, engine, hang_timeout_sec=6) as (harness, task, sandbox, policy):
        trajectory = await harness.run(task, sandbox, policy)
    assert trajectory.final_answer == "Hi." and trajectory.stop_reason == "completed"

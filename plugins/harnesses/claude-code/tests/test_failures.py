"""How Claude Code's failures reach the trial: a signal, a crash at start-up, a hang, the turn limit, an endpoint that
is down, the agent timeout, a context that is too small.

Each test runs the real Claude Code in a real local sandbox against the real gateway in front of a scripted engine;
where a crash cannot be ordered from the real binary, a stand-in script is shipped in its place, exactly as it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from pathlib import Path

import pytest

import tackroom_claude_code.harness as claude_harness
from tackroom import Policy, SandboxSpec, load_task, testing
from tackroom_agent_kit.testing import (
    EngineFailureForTests,
    Later,
    ScriptedEngineForTests,
    agent_processes,
    scripted_gateway,
    still_running,
    tool_call,
)
from tackroom_claude_code.errors import ClaudeCodeCrashError, ClaudeCodeModelError, ClaudeCodeTimeoutError
from tackroom_claude_code.harness import ClaudeCodeHarness
from tackroom_local import LocalSandboxProvider


def write_task(root: Path, name: str, *, instruction: str, test_sh: str, timeout_sec: float = 120) -> Path:
    """A Harbor-style task directory."""
    return testing.write_task(root, name, instruction=instruction, test_sh=test_sh, agent_timeout_sec=timeout_sec)

# slow by cost: each test boots the real Claude Code in a local sandbox
pytestmark = pytest.mark.slow


@contextlib.asynccontextmanager
async def prepared(tmp_path, engine, *, timeout_sec=60, **options):
    """Claude Code set up for a small task in a started local sandbox: (harness, task, sandbox, the gateway's policy)."""
    task = load_task(write_task(tmp_path, "t", instruction="Say hi.", test_sh="exit 0\n", timeout_sec=timeout_sec))
    async with scripted_gateway(engine) as gateway:
        sandbox = LocalSandboxProvider().create(SandboxSpec(name="claude-failure", memory_mb=2048))
        await sandbox.start()
        try:
            harness = ClaudeCodeHarness({"profile": "compact", **options})
            await harness.setup(sandbox, task)
            yield harness, task, sandbox, gateway.policy("s", sampling={"max_tokens": 64})
        finally:
            await sandbox.stop()


async def test_an_agent_that_kills_its_harness_gets_no_retry(tmp_path, smollm2_tokenizer, claude_install):
    # The hostile case: the model's Bash call sends Claude Code a SIGSEGV. As infra, the trial would be retried and,
    # still failing, dropped from training: a way out of a 0. It is the model's episode instead.
    engine = ScriptedEngineForTests(smollm2_tokenizer, replies=[
        tool_call("Bash", command="kill -SEGV $(pgrep -x claude); sleep 5", description="crash the harness")],
        default="Done.")
    async with prepared(tmp_path, engine) as (harness, task, sandbox, policy):
        with pytest.raises(ClaudeCodeModelError, match=r"killed by SIG[A-Z]+ .*after 1 model reply whose tool calls run") \
                as info:
            await harness.run(task, sandbox, policy)
        assert await agent_processes(sandbox) == ""
    assert info.value.error_class == "model" and info.value.trajectory.stop_reason == "claude_crashed"
    assert len(engine.prompts) == 1


async def test_no_progress_after_the_agents_command_is_a_hang_counted_as_the_models(tmp_path, smollm2_tokenizer,
                                                                                     claude_install):
    engine = ScriptedEngineForTests(smollm2_tokenizer, replies=[
        tool_call("Bash", command="sleep 300", description="wait", timeout=590000)], default="Done.")
    async with prepared(tmp_path, engine, hang_timeout_sec=10) as (harness, task, sandbox, policy):
        with pytest.raises(ClaudeCodeModelError, match="no progress for 10s.*after 1 model reply") as info:
            await harness.run(task, sandbox, policy)
        assert await agent_processes(sandbox) == ""
        assert not await still_running(sandbox, "sleep 300")
    assert info.value.trajectory.stop_reason == "hang" and len(engine.prompts) == 1


async def test_the_turn_limit_ends_the_episode_without_an_error(tmp_path, smollm2_tokenizer, claude_install):
    engine = ScriptedEngineForTests(smollm2_tokenizer, default=tool_call("Bash", command="true", description="again"))
    async with prepared(tmp_path, engine, max_turns=2) as (harness, task, sandbox, policy):
        trajectory = await harness.run(task, sandbox, policy)
    assert trajectory.stop_reason == "max_turns" and len(engine.prompts) == 2
    assert trajectory.metrics["turns"] == 2 and trajectory.metrics["tool_calls.Bash"] == 2


async def test_an_endpoint_that_is_down_is_infra(tmp_path, smollm2_tokenizer, claude_install):
    engine = ScriptedEngineForTests(smollm2_tokenizer, default="unused")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with prepared(tmp_path, engine) as (harness, task, sandbox, _):
        t0 = time.monotonic()
        with pytest.raises(ClaudeCodeCrashError, match="failed") as info:
            await harness.run(task, sandbox, Policy(base_url=f"http://127.0.0.1:{port}/v1", model="scripted"))
        assert time.monotonic() - t0 < 60 and await agent_processes(sandbox) == ""
    assert info.value.error_class == "infra" and info.value.trajectory.stop_reason == "endpoint_failing"


async def test_a_failing_engine_is_infra(tmp_path, smollm2_tokenizer, claude_install):
    engine = ScriptedEngineForTests(smollm2_tokenizer, default=EngineFailureForTests(500, "engine exploded"))
    async with prepared(tmp_path, engine) as (harness, task, sandbox, policy):
        with pytest.raises(ClaudeCodeCrashError) as info:
            await harness.run(task, sandbox, policy)
    assert info.value.error_class == "infra" and info.value.trajectory.stop_reason == "endpoint_failing"


async def test_context_exhaustion_is_the_models_failure(tmp_path, smollm2_tokenizer, claude_install):
    # Claude Code's own prompt and tools (the full profile) do not fit a 2048-token context.
    engine = ScriptedEngineForTests(smollm2_tokenizer, default="hi", max_model_len=2048)
    async with prepared(tmp_path, engine, profile="full") as (harness, task, sandbox, policy):
        with pytest.raises(ClaudeCodeModelError) as info:
            await harness.run(task, sandbox, policy)
    assert info.value.error_class == "model" and engine.prompts == []
    assert info.value.trajectory.stop_reason in ("context_exhausted", "model_error")


async def test_the_agent_timeout_stops_claude_and_keeps_the_trajectory(tmp_path, smollm2_tokenizer, claude_install):
    engine = ScriptedEngineForTests(smollm2_tokenizer, replies=[
        tool_call("Bash", command="sleep 600", description="wait", timeout=590000)], default="too late")
    async with prepared(tmp_path, engine, timeout_sec=20) as (harness, task, sandbox, policy):
        t0 = time.monotonic()
        with pytest.raises(ClaudeCodeTimeoutError, match=r"agent timeout \(20s\)") as info:
            await harness.run(task, sandbox, policy)
        assert 20 - 5 <= time.monotonic() - t0 < 20 + 15
        assert await agent_processes(sandbox) == ""
    assert info.value.error_class == "model" and info.value.trajectory.stop_reason == "agent_timeout"
    assert info.value.trajectory.metrics["turns"] == 1


async def test_cancelling_the_run_kills_claude_and_what_it_started(tmp_path, smollm2_tokenizer, claude_install):
    # The runtime enforces the agent timeout by cancelling harness.run; nothing may survive it, also a command the
    # agent sent into the background, in a session of its own.
    second_call = asyncio.Event()
    engine = ScriptedEngineForTests(smollm2_tokenizer, replies=[
        tool_call("Bash", command="setsid sleep 300 > /dev/null 2>&1 < /dev/null &", description="leave a process"),
        lambda prompt: second_call.set() or Later("too late", 600),
    ])
    async with prepared(tmp_path, engine, timeout_sec=600) as (harness, task, sandbox, policy):
        run = asyncio.create_task(harness.run(task, sandbox, policy))
        await asyncio.wait_for(second_call.wait(), 120)
        assert "sleep 300" in (await sandbox.exec("ps -eo args", timeout=30)).stdout
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        assert await agent_processes(sandbox) == ""
        assert not await still_running(sandbox, "sleep 300")


CRASH_AT_START_UP = """#!/bin/bash
echo "Bus error (core dumped)" >&2
kill -BUS $$
"""
CRASH_BEFORE_FIRST_TURN = """#!/bin/bash
if [ "$1" = "--version" ]; then echo "{version} (Claude Code)"; exit 0; fi
echo "starting" >&2
kill -SEGV $$
"""


def fake_install(tmp_path, monkeypatch, script: str, real):
    binary = tmp_path / "fake" / "claude"
    binary.parent.mkdir(parents=True)
    binary.write_text(script.format(version=real.version))
    binary.chmod(0o755)
    fake = real.model_copy(update={"binary": binary})

    async def installed(*args, **kwargs):
        return fake

    monkeypatch.setattr(claude_harness, "ensure_installed", installed)


async def test_a_crash_at_start_up_is_infra(tmp_path, monkeypatch, smollm2_tokenizer, claude_install):
    fake_install(tmp_path, monkeypatch, CRASH_AT_START_UP, claude_install)
    engine = ScriptedEngineForTests(smollm2_tokenizer, default="hi")
    with pytest.raises(ClaudeCodeCrashError, match=r"killed by SIGBUS .* at start-up .*Bus error") as info:
        async with prepared(tmp_path, engine):
            pass
    assert info.value.error_class == "infra"


async def test_a_crash_before_the_first_reply_is_infra(tmp_path, monkeypatch, smollm2_tokenizer, claude_install):
    fake_install(tmp_path, monkeypatch, CRASH_BEFORE_FIRST_TURN, claude_install)
    engine = ScriptedEngineForTests(smollm2_tokenizer, default="hi")
    async with prepared(tmp_path, engine) as (harness, task, sandbox, policy):
        with pytest.raises(ClaudeCodeCrashError, match=r"killed by SIGSEGV .*before its first turn") as info:
            await harness.run(task, sandbox, policy)
    assert info.value.error_class == "infra" and "starting" in str(info.value) and engine.prompts == []

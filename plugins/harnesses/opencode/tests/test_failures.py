"""How OpenCode's failures reach the trial: timeouts, hangs, crashes, context exhaustion, an unreachable policy.

Each test runs the real OpenCode in a real local sandbox against the real gateway
in front of a scripted engine (delays and context limits chosen per test).
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from opencode_tasks import write_task

from tackroom import SandboxSpec, load_task
from tackroom_agent_kit.testing import (
    Later,
    ScriptedEngineForTests,
    agent_processes,
    scripted_gateway,
    still_running,
    tool_call,
)
from tackroom_local import LocalSandbox, LocalSandboxOptions, LocalSandboxProvider
from tackroom_opencode.errors import (
    OpenCodeCrashError,
    OpenCodeModelError,
    OpenCodeTimeoutError,
    PolicyUnreachableError,
)
from tackroom_opencode.harness import OpenCodeHarness

# slow by cost: each test boots the real OpenCode in a local sandbox (~10 CPU-s apiece, ~70 for the module, and
# their hang and timeout windows make them wall-clock-bound too); `uv run pytest` and CI run them all.
pytestmark = pytest.mark.slow

@contextlib.asynccontextmanager
async def prepared(tmp_path, engine, *, timeout_sec=60, allow_internet=False, sandbox_cls=None, memory_mb=2048,
                   **options):
    """OpenCode set up for a small task in a started local sandbox: (harness, task, sandbox, the gateway's policy)."""
    task = load_task(write_task(tmp_path, "t", instruction="Say hi.", test_sh="exit 0\n", timeout_sec=timeout_sec))
    async with scripted_gateway(engine) as gateway:
        spec = SandboxSpec(name="opencode-failure", allow_internet=allow_internet, memory_mb=memory_mb)
        sandbox = sandbox_cls(spec, LocalSandboxOptions()) if sandbox_cls else LocalSandboxProvider().create(spec)
        await sandbox.start()
        try:
            harness = OpenCodeHarness(options)
            await harness.setup(sandbox, task)
            yield harness, task, sandbox, gateway.policy("s", sampling={"max_tokens": 64})
        finally:
            await sandbox.stop()


async def test_the_agent_timeout_stops_opencode_and_reports_a_model_timeout(tmp_path, smollm2_tokenizer, opencode_install):
    engine = ScriptedEngineForTests(smollm2_tokenizer, default="too late", delay_s=600)
    async with prepared(tmp_path, engine, timeout_sec=20) as (harness, task, sandbox, policy):
        t0 = time.monotonic()
        with pytest.raises(OpenCodeTimeoutError, match=r"agent timeout \(20s\)") as info:
            await harness.run(task, sandbox, policy)
        # Stopped before the runtime's own timeout would cancel it, so the trajectory survives.
        assert 20 - 5 <= time.monotonic() - t0 < 20 + 15
        assert info.value.trajectory.stop_reason == "agent_timeout"
        assert await agent_processes(sandbox) == ""
    assert info.value.error_class == "model" and len(engine.prompts) <= 1


async def test_cancelling_the_run_kills_opencode_and_what_it_started(tmp_path, smollm2_tokenizer, opencode_install):
    # The runtime enforces the agent timeout by cancelling harness.run; nothing may survive it.
    second_call = asyncio.Event()
    engine = ScriptedEngineForTests(smollm2_tokenizer, replies=[
        tool_call("bash", command="sleep 300 > /dev/null 2>&1 &", description="leave a process behind"),
        lambda prompt: second_call.set() or setattr(engine, "delay_s", 600) or "too late",
    ])
    async with prepared(tmp_path, engine, timeout_sec=600) as (harness, task, sandbox, policy):
        run = asyncio.create_task(harness.run(task, sandbox, policy))
        await asyncio.wait_for(second_call.wait(), 300)
        assert "sleep 300" in (await sandbox.exec("ps -eo args", timeout=30)).stdout
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        assert await agent_processes(sandbox) == ""
        assert not await still_running(sandbox, "sleep 300")


async def test_no_progress_after_the_agents_command_is_a_hang_counted_as_the_models(tmp_path, smollm2_tokenizer,
                                                                                     opencode_install):
    # OpenCode sits on the agent's command that never returns: nothing is written and no model call is in flight.
    # The agent's command did it, so it is the model's (reward 0): as infra it would be retried and then dropped
    # from training, and an agent failing a task would learn to block its harness instead.
    engine = ScriptedEngineForTests(smollm2_tokenizer, replies=[tool_call("bash", command="sleep 300", description="wait")],
                                    default="Done.")
    async with prepared(tmp_path, engine, hang_timeout_sec=10) as (harness, task, sandbox, policy):
        with pytest.raises(OpenCodeModelError, match="no progress for 10s.*after 1 model reply.*counted as the model's") \
                as info:
            await harness.run(task, sandbox, policy)
        assert await agent_processes(sandbox) == ""
    assert info.value.error_class == "model" and len(engine.prompts) == 1
    assert info.value.trajectory.stop_reason == "hang"
    log = str(info.value).split("--- opencode log (tail) ---")[1]
    assert "level=INFO" in log and "message=" in log


async def test_an_agent_that_kills_its_harness_gets_no_retry(tmp_path, smollm2_tokenizer, opencode_install):
    # The hostile case: the agent's bash call sends OpenCode a SIGSEGV (Bun's handler then dies by SIGILL). Classed
    # infra, the trial would be retried and, still failing, dropped from training: a way out of a 0. It is the
    # model's episode instead.
    engine = ScriptedEngineForTests(smollm2_tokenizer, replies=[
        tool_call("bash", command="kill -SEGV $PPID; sleep 5", description="crash the harness")], default="Done.")
    async with prepared(tmp_path, engine) as (harness, task, sandbox, policy):
        with pytest.raises(OpenCodeModelError, match=r"killed by SIG[A-Z]+ .*after 1 model reply whose tool calls run") as info:
            await harness.run(task, sandbox, policy)
        assert await agent_processes(sandbox) == ""
    assert info.value.error_class == "model" and info.value.trajectory.stop_reason == "opencode_crashed"


async def test_a_slow_model_is_not_a_hang(tmp_path, smollm2_tokenizer, opencode_install):
    engine = ScriptedEngineForTests(smollm2_tokenizer, replies=[Later("Hi.", 20)])
    # a model call slower than the hang timeout, which must be long enough for OpenCode to boot on a loaded machine
    async with prepared(tmp_path, engine, hang_timeout_sec=8) as (harness, task, sandbox, policy):
        trajectory = await harness.run(task, sandbox, policy)
    assert trajectory.final_answer == "Hi." and trajectory.stop_reason == "completed"


async def test_a_crash_is_an_infra_error_with_opencodes_stderr(tmp_path, smollm2_tokenizer, opencode_install):
    engine = ScriptedEngineForTests(smollm2_tokenizer, default="hi")
    async with prepared(tmp_path, engine, env={"OPENCODE_CONFIG": "/opt/opencode/broken.json"}) as (harness, task, sandbox, policy):
        await sandbox.write_file("/opt/opencode/broken.json", '{"provider": {broken')
        with pytest.raises(OpenCodeCrashError, match="exited with status 1") as info:
            await harness.run(task, sandbox, policy)
    assert "CloseBraceExpected" in str(info.value) and info.value.trajectory.stop_reason == "opencode_crashed"
    assert engine.prompts == []


async def test_a_sandbox_too_small_for_opencode_names_its_memory_limit(tmp_path, smollm2_tokenizer, opencode_install):
    # Tasks written for a terminal agent often ask for 256 MB; OpenCode is killed there (SIGKILL, 137), and the
    # error must say where to look rather than leave a bare exit status. Under load the OOM killer may take the
    # shell that waits for OpenCode's status too (CI saw it): the message names the limit then as well.
    engine = ScriptedEngineForTests(smollm2_tokenizer, default="hi")
    async with prepared(tmp_path, engine, memory_mb=256) as (harness, task, sandbox, policy):
        with pytest.raises(OpenCodeCrashError, match=r"was killed by SIGKILL \(signal 9, .*exit status 137\)"
                                                     r"|died without an exit status \(the shell waiting") as info:
            await harness.run(task, sandbox, policy)
    assert "memory limit of 256 MB" in str(info.value) and "memory_mb" in str(info.value)
    assert info.value.error_class == "infra" and info.value.trajectory.stop_reason == "opencode_crashed"


async def test_context_exhaustion_is_the_models_failure(tmp_path, smollm2_tokenizer, opencode_install):
    engine = ScriptedEngineForTests(smollm2_tokenizer, default="hi", max_model_len=2048)
    async with prepared(tmp_path, engine, profile="full") as (harness, task, sandbox, policy):
        with pytest.raises(OpenCodeModelError, match="outgrew the model's context") as info:
            await harness.run(task, sandbox, policy)
    assert info.value.error_class == "model" and info.value.trajectory.stop_reason == "context_exhausted"


class NoForwardSandbox(LocalSandbox):
    """A sandbox that cannot forward a host port into itself (as Modal and Daytona today)."""

    async def forward_host_port(self, port):
        raise NotImplementedError("no forwards here")


async def test_a_sandbox_that_cannot_forward_the_relay_says_so(tmp_path, smollm2_tokenizer, opencode_install):
    engine = ScriptedEngineForTests(smollm2_tokenizer, default="hi")
    async with prepared(tmp_path, engine, sandbox_cls=NoForwardSandbox) as (harness, task, sandbox, policy):
        with pytest.raises(PolicyUnreachableError, match="cannot forward a host port into itself") as info:
            await harness.run(task, sandbox, policy)
    assert info.value.error_class == "infra" and engine.prompts == []

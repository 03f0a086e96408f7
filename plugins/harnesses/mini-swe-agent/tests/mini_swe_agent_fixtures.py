"""Helpers for the mini-swe-agent harness tests: a started local sandbox with a small task, replies in its format."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from tackroom import SandboxSpec, load_task
from tackroom.testing import write_task
from tackroom_local import LocalSandboxProvider
from tackroom_mini_swe_agent.harness import MiniSweAgentHarness

EXAMPLES = Path(__file__).resolve().parents[4] / "examples" / "tasks"


def command(cmd: str, thought: str = "THOUGHT: one step.") -> str:
    """A reply in mini-swe-agent's text-based format: a thought and one fenced bash command."""
    return f"{thought}\n\n```mswea_bash_command\n{cmd}\n```"


SUBMIT = command("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")


@contextlib.asynccontextmanager
async def prepared(tmp_path, *, agent_timeout_sec: float = 60, **options):
    """(harness, task, sandbox) for a small task in a started local sandbox; the task's deadline set as the runtime
    sets it when the agent's turn starts."""
    task = load_task(write_task(tmp_path, "t", instruction="Create /app/out.txt holding `done`.",
                                test_sh="exit 0\n", agent_timeout_sec=agent_timeout_sec))
    task = task.model_copy(update={"deadline": time.time() + agent_timeout_sec})
    sandbox = LocalSandboxProvider().create(SandboxSpec(name="mini-swe-agent-test"))
    await sandbox.start()
    try:
        harness = MiniSweAgentHarness(MiniSweAgentHarness.Options.model_validate(options))
        await harness.setup(sandbox, task)
        yield harness, task, sandbox
    finally:
        await sandbox.stop()

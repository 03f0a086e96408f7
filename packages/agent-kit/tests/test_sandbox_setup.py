"""Setup steps in the sandbox: a failed command names what could not be done, and the check that the shipped agent
runs tells a crash at start-up (retried) from an agent that cannot run there.

The sandbox is a double answering each command from a script; the agent harnesses' tests run the real steps."""

from __future__ import annotations

import pytest

from tackroom import ExecResult, InfraError
from tackroom_agent_kit import AgentCrashError, check_it_runs, must_succeed


class SandboxDoubleForTests:
    """Answers every ``exec`` with ``result`` and records the commands."""

    def __init__(self, result: ExecResult) -> None:
        self.result = result
        self.commands: list[str] = []

    async def exec(self, cmd: str, timeout: float, **_: object) -> ExecResult:
        self.commands.append(cmd)
        return self.result


class ToySetupError(InfraError):
    """A harness's own setup error."""


class ToyCrashError(AgentCrashError):
    """A harness's own crash error."""


async def test_a_failed_step_says_what_could_not_be_done_with_its_output():
    await must_succeed(SandboxDoubleForTests(ExecResult(exit_code=0)), "mkdir -p /opt/toy", "create", error=ToySetupError)
    with pytest.raises(ToySetupError, match=r"could not create Toy's directories in the sandbox \(exit 1\): denied"):
        await must_succeed(SandboxDoubleForTests(ExecResult(exit_code=1, stderr="denied\n")), "mkdir -p /opt/toy",
                           "create Toy's directories", error=ToySetupError)


async def check(result: ExecResult) -> None:
    await check_it_runs(SandboxDoubleForTests(result), "/opt/toy/bin/toy --version", agent="Toy", version="1.2.3",
                        reads_right=lambda out: out.strip() == "1.2.3", shown="toy --version", crash=ToyCrashError,
                        error=ToySetupError, hint="Toy needs glibc")


async def test_the_agent_that_answers_its_version_runs():
    await check(ExecResult(exit_code=0, stdout="1.2.3\n"))


async def test_a_signal_at_start_up_is_a_crash_and_anything_else_a_setup_error():
    with pytest.raises(ToyCrashError, match=r"Toy 1.2.3 was killed by SIGBUS .* at start-up \(`toy --version`\): Bus"):
        await check(ExecResult(exit_code=135, stderr="Bus error (core dumped)"))
    with pytest.raises(ToySetupError, match=r"Toy 1.2.3 does not run in this sandbox \(exit 0\): 9.9.9. Toy needs glibc"):
        await check(ExecResult(exit_code=0, stdout="9.9.9"))
    with pytest.raises(ToySetupError, match=r"\(exit 127\): toy: not found"):
        await check(ExecResult(exit_code=127, stderr="toy: not found"))


async def test_a_binary_still_busy_from_its_upload_is_run_again():
    """Seen in a matrix at concurrency 4: `/opt/claude-code/bin/claude: Text file busy` (exit 126) right after the
    upload, as a process another trial forked still held the upload's descriptor; it ran a moment later."""
    busy = ExecResult(exit_code=126, stderr="bash: line 2: /opt/toy/bin/toy: Text file busy")

    class BusyThenFine(SandboxDoubleForTests):
        async def exec(self, cmd: str, timeout: float, **_: object) -> ExecResult:
            self.commands.append(cmd)
            return busy if len(self.commands) < 3 else ExecResult(exit_code=0, stdout="1.2.3\n")

    sandbox = BusyThenFine(busy)
    await check_it_runs(sandbox, "/opt/toy/bin/toy --version", agent="Toy", version="1.2.3",
                        reads_right=lambda out: out.strip() == "1.2.3", shown="toy --version", crash=ToyCrashError,
                        error=ToySetupError)
    assert len(sandbox.commands) == 3
    with pytest.raises(ToySetupError, match="Text file busy"):  # for good: a setup error after a few tries
        await check(busy)

"""Setup steps of an agent harness in the sandbox: commands that must succeed, and the check that the shipped agent
runs there at all (before a trial is spent on it)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from tackroom import Sandbox
from tackroom_agent_kit.errors import AgentCrashError
from tackroom_sandbox_kit import describe_exit, exit_signal

TEXT_BUSY_TRIES = 5


async def must_succeed(sandbox: Sandbox, cmd: str, what: str, *, error: type[Exception], timeout: float = 60) -> None:
    """Run ``cmd`` in the sandbox; when it fails, raise ``error``: could not ``what``, with its output."""
    result = await sandbox.exec(cmd, timeout=timeout)
    if not result.ok:
        raise error(f"could not {what} in the sandbox (exit {result.exit_code}): "
                    f"{(result.stderr or result.stdout).strip()[-1000:]}")


async def check_it_runs(sandbox: Sandbox, cmd: str, *, agent: str, version: str, reads_right: Callable[[str], bool],
                        shown: str, crash: type[AgentCrashError], error: type[Exception], hint: str = "") -> None:
    """Run the agent's version command ``cmd`` (``shown`` in messages) in the sandbox and check its output with
    ``reads_right``. Killed by a signal, it raises ``crash`` (a crash at start-up, as the "Bus error" of a binary
    cut short: retried); otherwise a wrong answer raises ``error`` (the agent does not run in this sandbox),
    ``hint`` saying why it might not."""
    for attempt in range(TEXT_BUSY_TRIES):
        result = await sandbox.exec(cmd, timeout=120)
        # ETXTBSY: the binary was uploaded a moment ago, and a process forked meanwhile (another trial's) may still
        # hold the upload's descriptor until its exec closes it: wait and run it again, as Go's os/exec does.
        if not (result.exit_code == 126 and "Text file busy" in result.stderr + result.stdout):
            break
        await asyncio.sleep(0.2 * (attempt + 1))
    if result.ok and reads_right(result.stdout):
        return
    said = (result.stderr or result.stdout).strip()[-1000:]
    if exit_signal(result.exit_code) is not None:
        raise crash(f"{agent} {version} {describe_exit(result.exit_code)} at start-up (`{shown}`): {said}")
    raise error(f"{agent} {version} does not run in this sandbox (exit {result.exit_code}): {said}"
                + (f". {hint}" if hint else ""))

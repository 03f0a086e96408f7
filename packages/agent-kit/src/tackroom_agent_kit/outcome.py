"""Whose failure a crash or a hang of the agent is: ``infra`` before the model's first reply reached the agent, the
model's after it.

After a reply, its tool calls ran in the sandbox and may have sent the signal or stopped the process (``kill -SEGV
$PPID``, ``kill -STOP``, a command that never returns). As infra, the trial would be retried and, still failing,
dropped from training: a way out of a 0 that an agent failing its task would learn. A genuine crash of the agent
mid-run is charged to the model too; the error rate shows it."""

from __future__ import annotations

import signal

from tackroom import Trajectory
from tackroom_agent_kit.errors import AgentCrashError, AgentModelError
from tackroom_agent_kit.relay import ModelRelay
from tackroom_sandbox_kit import describe_exit, exit_signal


def answered(relay: ModelRelay, steps: int = 0) -> int:
    """Model replies that reached the agent: the calls the relay saw answered, or the ``steps`` the agent reported
    when it reported more (a reply's tool calls may run before the agent writes the reply down)."""
    return max(steps, relay.calls - relay.failures - relay.refused)


def crash_or_model(message: str, replies: int, trajectory: Trajectory, *, crash: type[AgentCrashError],
                   model: type[AgentModelError]) -> AgentCrashError | AgentModelError:
    """A crash or a hang as ``crash`` (infra, retried) before any of the model's ``replies`` reached the agent; as
    ``model`` (reward 0, not retried) after one, saying so after the message's first line."""
    if not replies:
        return crash(message, trajectory)
    first, _, rest = message.partition("\n")
    return model(f"{first}, after {replies} model repl{'y' if replies == 1 else 'ies'} whose tool calls run in the "
                 "sandbox: counted as the model's (reward 0, not retried), since an agent can kill or stop its own "
                 "harness" + (f"\n{rest}" if rest else ""), trajectory)


def exit_described(exit_code: str | int | None, memory_mb: int | None, *, needs_mb: int | None = None,
                   agent: str = "the agent") -> str:
    """How the agent exited (``was killed by SIGSEGV (signal 11, ...)``); a SIGKILL inside a sandbox is nearly always
    its memory limit, so that one names the limit and the task key that sets it. So does a death without an exit
    status: the shell that waits for the agent to write its status was killed too, which the OOM killer does when
    killing the agent alone did not bring the sandbox under its limit (seen under CI's load, OpenCode at 256 MB)."""
    how = describe_exit(exit_code)
    died = exit_code is None or not str(exit_code).strip()
    if exit_signal(exit_code) == signal.SIGKILL or (died and memory_mb):
        if died:
            how += " (the shell waiting for it was killed as well)"
        how += f"; most likely the sandbox's memory limit of {memory_mb} MB, the task's [environment] memory_mb"
        if needs_mb:
            how += f"; {agent} needs at least {needs_mb} MB"
    return how

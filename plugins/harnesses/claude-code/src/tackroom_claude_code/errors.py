"""Errors of the claude-code harness; each says what to do about it."""

from __future__ import annotations

from tackroom import InfraError, ModelError, Trajectory
from tackroom_agent_kit import PolicyUnreachableError  # the sandbox cannot connect to the policy (infra)

__all__ = ["ClaudeCodeCrashError", "ClaudeCodeModelError", "ClaudeCodeSetupError", "ClaudeCodeTimeoutError",
           "PolicyUnreachableError"]


class ClaudeCodeSetupError(InfraError):
    """Claude Code could not be put into the sandbox or does not run there."""


class ClaudeCodeCrashError(InfraError):
    """Claude Code exited with an error, died or stopped making progress before the model's first reply reached it,
    or the model endpoint kept failing; its stderr is in the message."""

    def __init__(self, message: str, trajectory: Trajectory | None = None) -> None:
        super().__init__(message)
        self.trajectory = trajectory


class ClaudeCodeModelError(ModelError):
    """The policy's own failure seen through Claude Code: context exhausted, a request the endpoint rejected, or a
    crash or hang after a model reply whose tool calls ran in the sandbox."""

    def __init__(self, message: str, trajectory: Trajectory | None = None) -> None:
        super().__init__(message)
        self.trajectory = trajectory


class ClaudeCodeTimeoutError(ModelError):
    """The agent timeout came while Claude Code was still working; it was stopped and the verifier grades what it left.

    Not a ``TimeoutError``: the runtime turns those into its own error and would drop the trajectory attached here.
    """

    def __init__(self, message: str, trajectory: Trajectory | None = None) -> None:
        super().__init__(message)
        self.trajectory = trajectory

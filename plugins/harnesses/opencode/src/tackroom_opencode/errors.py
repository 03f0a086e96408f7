"""Errors of the opencode harness; each says what to do about it."""

from __future__ import annotations

from tackroom import InfraError, ModelError, Trajectory
from tackroom_agent_kit import PolicyUnreachableError  # the sandbox cannot connect to the policy (infra)


class OpenCodeCrashError(InfraError):
    """OpenCode exited with an error, or stopped making progress (a hang); its log is in the message."""

    def __init__(self, message: str, trajectory: Trajectory | None = None) -> None:
        super().__init__(message)
        self.trajectory = trajectory


class OpenCodeModelError(ModelError):
    """The policy's own failure seen through OpenCode (context exhausted, an answer the provider rejected)."""

    def __init__(self, message: str, trajectory: Trajectory | None = None) -> None:
        super().__init__(message)
        self.trajectory = trajectory


class OpenCodeTimeoutError(ModelError):
    """The agent timeout came while OpenCode was still working; it was stopped and the verifier grades what it left.

    Not a ``TimeoutError``: the runtime turns those into its own error and would drop the trajectory attached here.
    """

    def __init__(self, message: str, trajectory: Trajectory | None = None) -> None:
        super().__init__(message)
        self.trajectory = trajectory


__all__ = ["OpenCodeCrashError", "OpenCodeModelError", "OpenCodeTimeoutError", "PolicyUnreachableError"]

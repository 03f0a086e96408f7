"""Errors of the codex harness; each says what to do about it."""

from __future__ import annotations

from tackroom import InfraError, ModelError, Trajectory


class CodexCrashError(InfraError):
    """Codex exited with an error, died or stopped making progress before the model's first reply reached it, or
    the model endpoint kept failing; its stderr is in the message."""

    def __init__(self, message: str, trajectory: Trajectory | None = None) -> None:
        super().__init__(message)
        self.trajectory = trajectory


class CodexModelError(ModelError):
    """The policy's own failure seen through Codex (context exhausted, an answer the endpoint rejected), or a crash
    or hang after the model's commands ran in the sandbox."""

    def __init__(self, message: str, trajectory: Trajectory | None = None) -> None:
        super().__init__(message)
        self.trajectory = trajectory


class CodexTimeoutError(ModelError):
    """The agent timeout came while Codex was still working; it was stopped and the verifier grades what it left.

    Not a ``TimeoutError``: the runtime turns those into its own error and would drop the trajectory attached here.
    """

    def __init__(self, message: str, trajectory: Trajectory | None = None) -> None:
        super().__init__(message)
        self.trajectory = trajectory


class CodexSetupError(InfraError):
    """Codex could not be put into the sandbox or does not run there."""

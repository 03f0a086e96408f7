"""Errors of the gemini-cli harness; each says what to do about it."""

from __future__ import annotations

from tackroom import InfraError, ModelError, Trajectory


class GeminiCliCrashError(InfraError):
    """The Gemini CLI could not start, crashed before the model acted, or stopped making progress: retried."""

    def __init__(self, message: str, trajectory: Trajectory | None = None) -> None:
        super().__init__(message)
        self.trajectory = trajectory


class GeminiCliModelError(ModelError):
    """The policy's own failure seen through the Gemini CLI (a crash or hang after the model acted, a refused turn)."""

    def __init__(self, message: str, trajectory: Trajectory | None = None) -> None:
        super().__init__(message)
        self.trajectory = trajectory


class GeminiCliTimeoutError(ModelError):
    """The agent timeout came while the Gemini CLI was still working; it was stopped and its work is graded."""

    def __init__(self, message: str, trajectory: Trajectory | None = None) -> None:
        super().__init__(message)
        self.trajectory = trajectory

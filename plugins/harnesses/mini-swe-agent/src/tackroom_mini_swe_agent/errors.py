"""Errors of the mini-swe-agent harness; each carries the trajectory so far (``trajectory``) and says what happened."""

from __future__ import annotations

from tackroom import InfraError, ModelError, Trajectory


class MiniSweAgentModelError(ModelError):
    """The policy's own failure seen through mini-swe-agent: context exhausted, a reply the endpoint rejected, or
    the agent failing after the model's replies started driving it."""

    def __init__(self, message: str, trajectory: Trajectory | None = None) -> None:
        super().__init__(message)
        self.trajectory = trajectory


class MiniSweAgentInfraError(InfraError):
    """The machinery failed under mini-swe-agent: the policy endpoint down or failing, or the agent failing before
    the model's first reply."""

    def __init__(self, message: str, trajectory: Trajectory | None = None) -> None:
        super().__init__(message)
        self.trajectory = trajectory

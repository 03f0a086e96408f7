"""How an agent's run can fail, each carrying the trajectory it left; a harness subclasses each under its own name
(``OpenCodeCrashError``), which is what runs, retries and the matrix's retry causes show."""

from __future__ import annotations

from tackroom import InfraError, ModelError, Trajectory


class AgentCrashError(InfraError):
    """The agent crashed, died or hung before the model's first reply reached it, or the model endpoint kept
    failing: ``infra``, retried."""

    def __init__(self, message: str, trajectory: Trajectory | None = None) -> None:
        super().__init__(message)
        self.trajectory = trajectory


class AgentModelError(ModelError):
    """The policy's own failure seen through the agent (context exhausted, a request the endpoint rejected), or a
    crash or hang after a model reply whose tool calls ran in the sandbox: reward 0, not retried."""

    def __init__(self, message: str, trajectory: Trajectory | None = None) -> None:
        super().__init__(message)
        self.trajectory = trajectory


class AgentTimeoutError(ModelError):
    """The agent timeout came while the agent was still working; it was stopped and the verifier grades what it left.

    Not a ``TimeoutError``: the runtime turns those into its own error and would drop the trajectory attached here.
    """

    def __init__(self, message: str, trajectory: Trajectory | None = None) -> None:
        super().__init__(message)
        self.trajectory = trajectory

"""Errors of the codex harness; each says what to do about it."""

from __future__ import annotations

from tackroom import InfraError
from tackroom_agent_kit import AgentCrashError, AgentModelError, AgentTimeoutError


class CodexCrashError(AgentCrashError):
    """Codex exited with an error, died or stopped making progress before the model's first reply reached it, or
    the model endpoint kept failing; its stderr is in the message."""


class CodexModelError(AgentModelError):
    """The policy's own failure seen through Codex (context exhausted, an answer the endpoint rejected), or a crash
    or hang after the model's commands ran in the sandbox."""


class CodexTimeoutError(AgentTimeoutError):
    """The agent timeout came while Codex was still working; it was stopped and the verifier grades what it left."""


class CodexSetupError(InfraError):
    """Codex could not be put into the sandbox or does not run there."""

"""Errors of the claude-code harness; each says what to do about it."""

from __future__ import annotations

from tackroom import InfraError
from tackroom_agent_kit import (
    AgentCrashError,
    AgentModelError,
    AgentTimeoutError,
    PolicyUnreachableError,  # the sandbox cannot connect to the policy (infra)
)

__all__ = ["ClaudeCodeCrashError", "ClaudeCodeModelError", "ClaudeCodeSetupError", "ClaudeCodeTimeoutError",
           "PolicyUnreachableError"]


class ClaudeCodeSetupError(InfraError):
    """Claude Code could not be put into the sandbox or does not run there."""


class ClaudeCodeCrashError(AgentCrashError):
    """Claude Code exited with an error, died or stopped making progress before the model's first reply reached it,
    or the model endpoint kept failing; its stderr is in the message."""


class ClaudeCodeModelError(AgentModelError):
    """The policy's own failure seen through Claude Code: context exhausted, a request the endpoint rejected, or a
    crash or hang after a model reply whose tool calls ran in the sandbox."""


class ClaudeCodeTimeoutError(AgentTimeoutError):
    """The agent timeout came while Claude Code was still working; it was stopped and the verifier grades what it
    left."""
